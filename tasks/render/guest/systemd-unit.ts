/** A simple long-running service unit, as the guest features install them. */
export interface ServiceUnit {
  comment: string;
  description: string;
  user: string;
  execStart: string;
  /** Further [Unit] lines. */
  unit?: string[];
  /** Further [Service] lines. */
  service?: string[];
}

export function renderServiceUnit(unit: ServiceUnit): string {
  return [
    `# ${unit.comment}`,
    '[Unit]',
    `Description=${unit.description}`,
    'After=network-online.target',
    'Wants=network-online.target',
    ...(unit.unit ?? []),
    '',
    '[Service]',
    `User=${unit.user}`,
    `Group=${unit.user}`,
    ...(unit.service ?? []),
    `ExecStart=${unit.execStart}`,
    'Restart=on-failure',
    '',
    '[Install]',
    'WantedBy=multi-user.target',
    '',
  ].join('\n');
}
