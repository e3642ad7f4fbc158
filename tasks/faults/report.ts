import type { FaultDrillReport, FaultResult } from './run.ts';

/** A fault drill's report for people: lines for the terminal, and Markdown for a ticket or a wiki page. */

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

function outcome(fault: FaultResult): string {
  if (fault.error) return `FAILED: ${fault.error}`;
  const verify = fault.verifyFailed.length === 0 ? 'verify passed' : `verify FAILED: ${fault.verifyFailed.join('; ')}`;
  const leader = fault.leaderAfter === fault.leaderBefore ? `${fault.leaderBefore} still leads` : `${fault.leaderAfter} leads now`;
  return `settled after ${seconds(fault.settledMs! - fault.injectedMs)}; ${fault.elections} election(s), ${leader}; ${verify}`;
}

const clients = (fault: FaultResult) =>
  `longest without an acknowledged write ${seconds(fault.longestWriteGapMs)}, ` +
  `${fault.failedOperations} client operation(s) failed and were retried elsewhere`;

function historyLine(report: FaultDrillReport): string {
  const { history } = report;
  return history.problems.length === 0
    ? `history: every acknowledged write kept, every read linearizable (${history.writes.acknowledged} writes acknowledged, ` +
        `${history.writes.failed} failed; ${history.reads.answered} reads, ${history.reads.failed} failed)`
    : `history: ${history.problems.length} problem(s): ${history.problems.map((problem) => `${problem.kind}: ${problem.says}`).join('; ')}`;
}

export function faultDrillLines(report: FaultDrillReport): string {
  return [
    ...report.faults.flatMap((fault) => [`${fault.kind} on ${fault.member}: ${outcome(fault)}`, `  ${clients(fault)}`]),
    historyLine(report),
    report.cleanup,
    report.passed ? 'PASSED: no acknowledged write lost, the history linearizable, verify passed after every fault' : 'FAILED: see above',
  ].join('\n');
}

export function faultDrillMarkdown(report: FaultDrillReport, cluster: string): string {
  const rows = report.faults.map((fault) => {
    const settled = fault.settledMs === undefined ? '—' : seconds(fault.settledMs - fault.injectedMs);
    const verdict = fault.error
      ? `failed: ${fault.error}`
      : fault.verifyFailed.length === 0
        ? 'passed'
        : `failed: ${fault.verifyFailed.join('; ')}`;
    return (
      `| ${fault.kind} | ${fault.member} | ${settled} | ${seconds(fault.longestWriteGapMs)} ` +
      `| ${fault.failedOperations} | ${fault.elections ?? '—'} | ${verdict} |`
    );
  });
  return [
    `# Fault drill of ${cluster}, ${report.started}`,
    '',
    `**${report.passed ? 'Passed' : 'Failed'}.** ${historyLine(report)}.`,
    '',
    '| fault | member | settled after | longest without a write | failed operations | elections | verify |',
    '|---|---|---|---|---|---|---|',
    ...rows,
    '',
    ...report.faults.map((fault) => `- **${fault.kind}**: ${fault.says}.`),
    '',
    report.cleanup,
    '',
  ].join('\n');
}
