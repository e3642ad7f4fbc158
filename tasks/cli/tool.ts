import { parseArgs, type ParseArgsConfig } from 'node:util';
import { describeError, EXIT, InputError, reportInputError } from '../core/errors.ts';
import { silenceKnownWarnings } from '../core/warnings.ts';

/**
 * The frame of the small tools beside deploy (backup, status, maintain): flags parsed strictly, -h,
 * -i required, bad input exit 2 with the help, an expected failure (etcd, S3, SSH) exit 1 with its
 * message and no stack trace.
 */

type Options = NonNullable<ParseArgsConfig['options']>;
export type FlagValues = Record<string, string | boolean | (string | boolean)[] | undefined>;

export interface Tool {
  help: string;
  /** Flags besides -i/--inventory and -h/--help. */
  options: Options;
  /** Takes words after its flags (`logs MEMBER UNIT`); without, any is bad input. */
  positionals?: true;
  /** Runs with the parsed flags, the inventory path and the words given; resolves to the exit code. */
  run: (values: FlagValues, inventory: string, positionals: string[]) => Promise<number>;
  /** Names the failure: "backup failed", "status failed". */
  failure: string;
}

export async function runTool(tool: Tool, argv = process.argv.slice(2)): Promise<number> {
  silenceKnownWarnings();
  let values: FlagValues;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: argv,
      options: { ...tool.options, inventory: { type: 'string', short: 'i' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
      allowPositionals: tool.positionals === true,
    }));
  } catch (error) {
    return reportInputError(new InputError(`${(error as Error).message}\n\n${tool.help}`));
  }
  if (values.help) {
    console.log(tool.help);
    return EXIT.ok;
  }
  if (typeof values.inventory !== 'string') return reportInputError(new InputError(`-i INVENTORY is required\n\n${tool.help}`));
  try {
    return await tool.run(values, values.inventory, positionals);
  } catch (error) {
    if (error instanceof InputError) return reportInputError(error);
    console.error(`error: ${tool.failure}: ${describeError(error)}`);
    return EXIT.failed;
  }
}
