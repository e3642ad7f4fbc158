import { Duplex } from 'node:stream';

/**
 * A stand-in for `virsh` in its interactive mode, as a Duplex like the SSH channel it is reached over:
 * it prints a prompt, echoes each line it reads (as virsh does when its input is not a terminal),
 * runs the line's `;`-separated commands and ends each one's output with a blank line. What a
 * command answers is the test's business (`run`); every line it ran is kept in `lines`.
 */
export class FakeVirshSession extends Duplex {
  readonly lines: string[] = [];
  /** False: lines are read but nothing is answered (a hung libvirtd). */
  answering = true;
  #pending = '';
  #answered = Promise.resolve();

  constructor(public run: (args: string[]) => string) {
    super();
    setImmediate(() => this.push('virsh # '));
  }

  override _read(): void {}

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (error?: Error | null) => void): void {
    this.#pending += chunk.toString('utf8');
    for (let newline = this.#pending.indexOf('\n'); newline >= 0; newline = this.#pending.indexOf('\n')) {
      const line = this.#pending.slice(0, newline);
      this.#pending = this.#pending.slice(newline + 1);
      this.lines.push(line);
      if (!this.answering) continue;
      let output = `${line}\n`;
      // As virsh without -q: a blank line after each command's output.
      for (const command of splitCommands(line))
        output += command[0] === 'echo' ? `${command.slice(1).join(' ')}\n` : `${this.run(command)}\n`;
      // Answered a moment later, in two pieces (a reader must not expect whole replies per chunk), one line after the other.
      this.#answered = this.#answered.then(async () => {
        await new Promise(setImmediate);
        this.push(output.slice(0, output.length >> 1));
        await new Promise(setImmediate);
        this.push(`${output.slice(output.length >> 1)}virsh # `);
      });
    }
    done();
  }
}

/** Words as sh (and virsh) split them: single quotes, and `'\''` for a quote inside them; `;` between commands. */
function splitCommands(line: string): string[][] {
  const commands: string[][] = [[]];
  let word: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (c === "'") {
      const end = line.indexOf("'", i + 1);
      word = (word ?? '') + line.slice(i + 1, end);
      i = end;
    } else if (c === '\\') {
      word = (word ?? '') + line[++i];
    } else if (c === ' ') {
      if (word !== undefined) commands.at(-1)!.push(word);
      word = undefined;
    } else if (c === ';' && word === undefined) {
      commands.push([]);
    } else word = (word ?? '') + c;
  }
  if (word !== undefined) commands.at(-1)!.push(word);
  return commands.filter((command) => command.length > 0);
}
