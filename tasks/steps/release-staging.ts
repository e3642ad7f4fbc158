import type { GuestRelease } from '../render/etcd-release.ts';

/**
 * The releases a roll installs, installed ahead on every member whose plan installs one: unpacking an archive
 * costs seconds of a TCG guest's CPU, which a member's turn in the roll then does not pay. One member at a time, in
 * the roll's order (followers first, the leader last), each at the lowest CPU and I/O weight in its guest
 * (release-install.ts): while it installs, the other members keep the quorum with the machine's whole CPU. All at
 * once, every etcd was starved together, and a client waited 17-26 s for an acknowledged write in a roll whose
 * restarts alone pause it ~3 s (issue 50). A release's directory sits beside the running one and changes nothing
 * until etcd.env names it, so a roll that stops early leaves the later members running what they ran. Best effort:
 * a member whose install ahead failed installs in its own turn, and fails there if it must.
 */

interface Install {
  member: string;
  release: GuestRelease;
}

type Pending = readonly { target: string; changes: readonly { action: { kind: string; release?: GuestRelease } }[] }[];

const keyOf = ({ member, release }: Install) => `${member}\n${release.dir}`;

export class ReleaseStaging {
  /** The installs the members' plans hold, as the roll's order learned them. */
  #wanted: Install[] = [];
  #staged: Promise<Set<string>> | undefined;

  constructor(readonly install: (member: string, release: GuestRelease) => Promise<void>) {}

  /**
   * Remembers what this roll installs where (the runner hands the roll every member with changes), in the roll's
   * order: `order` is its members as its waves take them.
   */
  learn(pending: Pending, order: readonly string[]): void {
    const turn = (member: string) => (order.includes(member) ? order.indexOf(member) : order.length);
    this.#wanted = [...pending]
      .sort((a, b) => turn(a.target) - turn(b.target))
      .flatMap(({ target, changes }) =>
        changes.flatMap(({ action }) =>
          action.kind === 'install-release' && action.release ? [{ member: target, release: action.release }] : [],
        ),
      );
  }

  /** Installs everything wanted, once per roll (when its first member applies); then tells which installs were done ahead. */
  async staged(): Promise<(member: string, release: GuestRelease) => boolean> {
    this.#staged ??= this.#stage();
    const done = await this.#staged;
    return (member, release) => done.has(keyOf({ member, release }));
  }

  async #stage(): Promise<Set<string>> {
    // One member alone gains nothing from going first.
    const members = [...new Set(this.#wanted.map(({ member }) => member))];
    if (members.length < 2) return new Set();
    const done = new Set<string>();
    for (const install of this.#wanted)
      await this.install(install.member, install.release).then(
        () => done.add(keyOf(install)),
        () => undefined,
      );
    return done;
  }
}
