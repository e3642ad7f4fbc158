import type { Step } from '../core/step.ts';
import type { Member } from '../inventory/model.ts';
import { join } from 'node:path';
import { rememberSeedDigest, seedDigest, seedImage, seedIso, type SeedDigest } from '../libvirt/cloud-init-iso.ts';
import { volInfo, volumeState, type VolumeState } from '../libvirt/volumes.ts';
import type { RenderedFile } from '../render/member.ts';
import type { RemoteContext } from '../libvirt/context.ts';
import { commandLine } from '../core/shell.ts';
import { virshArgv, type Question } from '../libvirt/virsh.ts';
import { memberTargets } from './member-targets.ts';
import { deployStep } from './deploy-step.ts';

/**
 * Each member's NoCloud seed as a raw volume in its pool. The ISO is reproducible, so the volume's
 * digest tells whether it holds exactly what was rendered; a missing one is created and uploaded, a
 * different one rewritten in place (the upload grows it when the new ISO is larger; a smaller one is
 * padded with zeros), streamed over the SSH channel's stdin. Never deleted: between a delete and a create a
 * killed run would leave a defined domain without its seed. The seed is configuration, not data:
 * rewriting it is safe, and cloud-init only reads it again for a new instance-id.
 */

interface SeedState {
  volume: VolumeState;
  remoteSha256?: string;
  wanted: SeedDigest;
}

/** Does the seed volume exist, and what is its content's digest (streamed through sha256sum, never stored)? */
export function seedQuestions(member: Member): Record<'info' | 'digest', Question> {
  const { pool, name: volume } = member.volumes.cloudInit;
  return {
    info: volInfo(pool, volume),
    digest: {
      shell: `${commandLine(virshArgv(member.hypervisor.libvirtUri, ['vol-download', '--pool', pool, volume, '/dev/stdout']))} | sha256sum`,
    },
  };
}

export function cloudInitIsoStep({
  stateDir,
  members,
  rendered,
  context,
}: {
  stateDir: string;
  members: readonly Member[];
  rendered: ReadonlyMap<string, RenderedFile[]>;
  context: RemoteContext;
}): Step<SeedState, null> {
  const { targets, memberNamed } = memberTargets(members);
  const filesOf = (name: string) => rendered.get(name) ?? [];
  const memoOf = (name: string) => join(stateDir, 'seeds', `${name}.json`);
  return {
    name: 'cloud-init',
    targets,
    async check(name) {
      const member = memberNamed(name);
      const { pool, name: volume } = member.volumes.cloudInit;
      const answers = await context.probe(member, seedQuestions(member));
      const state = volumeState(answers.info, `cloud-init volume ${pool}/${volume}`);
      const wanted = await seedDigest(memoOf(name), filesOf(name), state.exists ? state.capacityBytes : 0);
      return { volume: state, wanted, ...(state.exists ? { remoteSha256: answers.digest.output.trim().split(/\s+/)[0] } : {}) };
    },
    plan(state, name) {
      const { pool, name: volume } = memberNamed(name).volumes.cloudInit;
      if (!state.volume.exists) return [{ summary: `upload cloud-init ISO ${pool}/${volume} (${state.wanted.size} bytes)`, action: null }];
      if (state.remoteSha256 === state.wanted.sha256) return [];
      // The content diff is shown by the render step; the ISO itself only differs by digest.
      const digests = `sha256 ${state.remoteSha256?.slice(0, 12)} -> ${state.wanted.sha256.slice(0, 12)}`;
      const grow = state.wanted.imageSize > state.volume.capacityBytes ? `, the volume grown to ${state.wanted.imageSize} bytes` : '';
      return [{ summary: `rewrite cloud-init ISO ${pool}/${volume} in place (${digests}${grow})`, action: null }];
    },
    async apply(_changes, name, state) {
      const member = memberNamed(name);
      const iso = await seedIso(filesOf(name));
      const virsh = await context.virshFor(member);
      const { pool, name: volume } = member.volumes.cloudInit;
      // The size the check planned for: the ISO is reproducible, so the one built now is the one it digested.
      const image = seedImage(iso, state.wanted.imageSize);
      if (!state.volume.exists)
        await virsh.run(['vol-create-as', '--pool', pool, '--name', volume, '--capacity', `${image.length}`, '--format', 'raw']);
      // A larger image grows the file as it is written (vol-resize would need the write lock QEMU holds on an attached seed).
      await virsh.run(['vol-upload', '--pool', pool, volume, '/dev/stdin'], { stdin: image });
      rememberSeedDigest(memoOf(name), filesOf(name), iso, image);
    },
  };
}

declare module './deploy-step.ts' {
  interface PassSteps {
    'cloud-init': true;
  }
}

export const cloudInit = deployStep({
  id: 'cloud-init',
  kind: 'operation',
  on: 'hypervisors',
  selectable: true,
  changes: ['libvirt'],
  doc: 'the NoCloud seed ISO of each member',
  converge: {},
  asksHypervisor: (member) => Object.values(seedQuestions(member)),
  run: ({ pass }, run) => {
    const { inventory, remote, membersNamed } = run.resources;
    return run.runner.runStep(
      cloudInitIsoStep({
        stateDir: inventory.stateDir,
        members: membersNamed(pass.members),
        rendered: run.renderedFor(pass).files,
        context: remote,
      }),
    );
  },
});
