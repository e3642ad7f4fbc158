import type { GuestRelease } from '../render/etcd-release.ts';

/**
 * The releases a roll installs, installed ahead on every member whose plan installs one, all at once:
 * unpacking an archive costs seconds of a TCG guest's CPU, which a member's turn in the roll then does
 * not pay. A release's directory sits beside the running one and changes nothing until etcd.env names
 * it, so a roll that stops early leaves the later members running what they ran. Best effort: a member
 * whose install ahead failed installs in its own turn, and fails there if it must.
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

  /** Remembers what this roll installs where (the runner hands the roll every member with changes). */
  learn(pending: Pending): void {
    this.#wanted = pending.flatMap(({ target, changes }) =>
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
    const done = await Promise.all(
      members.map(async (member) => {
        const installs = this.#wanted.filter((install) => install.member === member);
        const ok: string[] = [];
        // One member's installs one after another: its guest has one CPU.
        for (const install of installs)
          await this.install(install.member, install.release).then(
            () => ok.push(keyOf(install)),
            () => undefined,
          );
        return ok;
      }),
    );
    return new Set(done.flat());
  }
}
