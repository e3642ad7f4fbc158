import type { FaultDrillReport } from './run.ts';

/**
 * A fault drill as a picture (SVG): a row per member, time across; each fault a band on its member's row
 * from its start until the cluster was healthy again, each client operation that failed a red tick on the
 * row of the member it went to, and the leader named under each fault. For people who would rather look
 * than read the report.
 */

const ROW = 28;
const LEFT = 90;
const WIDTH = 900;
const xmlText = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

export function faultDrillSvg(report: FaultDrillReport, members: readonly string[]): string {
  const endMs = Math.max(
    1,
    ...report.operations.map((op) => op.returnedMs),
    ...report.faults.map((fault) => fault.settledMs ?? fault.injectedMs),
  );
  const x = (ms: number) => (LEFT + (ms / endMs) * WIDTH).toFixed(1);
  const y = (member: string) => 20 + members.indexOf(member) * ROW;
  const height = 20 + members.length * ROW + 40;
  const rows = members.map(
    (member) =>
      `<text x="4" y="${y(member) + 18}" font-size="12">${xmlText(member)}</text><line x1="${LEFT}" ` +
      `x2="${LEFT + WIDTH}" y1="${y(member) + 14}" y2="${y(member) + 14}" stroke="#ccc"/>`,
  );
  const faults = report.faults.map((fault) => {
    const end = fault.settledMs ?? endMs;
    const fill = fault.error || fault.verifyFailed.length > 0 ? '#e06666' : '#f6b26b';
    return (
      `<g class="fault"><title>${xmlText(`${fault.kind} on ${fault.member}: ${fault.says}`)}</title><rect x="${x(fault.injectedMs)}" ` +
      `y="${y(fault.member) + 4}" width="${(Number(x(end)) - Number(x(fault.injectedMs))).toFixed(1)}" height="20" fill="${fill}" ` +
      `opacity="0.8"/><text x="${x(fault.injectedMs)}" y="${y(fault.member) + 18}" font-size="11">${xmlText(fault.kind)}</text></g>`
    );
  });
  const failures = report.operations
    .filter((op) => !op.ok && members.includes(op.member))
    .map(
      (op) =>
        `<line class="failed" x1="${x(op.invokedMs)}" x2="${x(op.invokedMs)}" y1="${y(op.member) + 2}" ` +
        `y2="${y(op.member) + 26}" stroke="#cc0000"><title>${xmlText(`${op.kind} ${op.error ?? ''}`)}</title></line>`,
    );
  const axisY = 20 + members.length * ROW + 10;
  const ticks = Array.from({ length: 11 }, (_, i) => {
    const ms = (endMs * i) / 10;
    return `<text x="${x(ms)}" y="${axisY + 14}" font-size="10" text-anchor="middle">${(ms / 1000).toFixed(0)} s</text>`;
  });
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${LEFT + WIDTH + 20}" height="${height}" font-family="sans-serif">`,
    `<title>${xmlText(`Fault drill, ${report.started}: ${report.passed ? 'passed' : 'failed'}`)}</title>`,
    ...rows,
    ...faults,
    ...failures,
    `<line x1="${LEFT}" x2="${LEFT + WIDTH}" y1="${axisY}" y2="${axisY}" stroke="#000"/>`,
    ...ticks,
    '</svg>',
    '',
  ].join('\n');
}
