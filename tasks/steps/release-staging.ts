/**
 * A release installed ahead of a roll on every member whose plan installs it, all at once: unpacking
 * an archive costs seconds of a TCG guest's CPU, which a member's turn in the roll then does not pay.
 * A release's directory sits beside the running one and changes nothing until etcd.env names it, so a
 * roll that stops early leaves the later members running what they ran. Best effort: a member whose
 * install ahead failed installs in its own turn, and fails there if it must.
 */
export class ReleaseStaging {
  /** The members whose plan installs a release, as the roll's order learned them. */
  #wanted: string[] = [];
  #staged: Promise<Set<string>> | undefined;

  constructor(readonly install: (member: string) => Promise<void>) {}

  /** Remembers who installs a release in this roll (the runner hands the roll every member with changes). */
  learn(pending: readonly { target: string; changes: readonly { action: { kind: string } }[] }[]): void {
    this.#wanted = pending
      .filter(({ changes }) => changes.some((change) => change.action.kind === 'install-release'))
      .map(({ target }) => target);
  }

  /** Installs on every member that wants it, once per roll (when its first member applies); the members it got to. */
  staged(): Promise<Set<string>> {
    this.#staged ??= this.#stage();
    return this.#staged;
  }

  async #stage(): Promise<Set<string>> {
    // One member alone gains nothing from going first.
    if (this.#wanted.length < 2) return new Set();
    const done = await Promise.all(
      this.#wanted.map((member) =>
        this.install(member).then(
          () => member,
          () => undefined,
        ),
      ),
    );
    return new Set(done.filter((member): member is string => member !== undefined));
  }
}
