import test from 'ava';
import { scenario } from '../helpers/timing.ts';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LAB } from '../../scripts/lab/config.ts';
import { run } from '../helpers/exec.ts';
import { CLIENT_NAMESPACE, deploy, etcdctl, freshLab, inLab, labRemoved, virsh, type DeployRun, type Identity } from '../helpers/lab.ts';

/**
 * macvtap members on the real lab: each member's only NIC is a macvtap device in bridge mode on the
 * hypervisor's host interface etcdlab-mv0 (one end of a veth pair lab:up creates). The tool runs in
 * the client namespace at the other end, as an operator's machine on the LAN would, and reaches etcd
 * directly; the hypervisor itself cannot reach its macvtap guests, which the test shows too.
 */

const INVENTORY = 'inventories/lab-macvtap.yaml';
const STATE = 'inventories/.etcd-kvm/lab-macvtap';
const MEMBERS = { 'etcd-mv-1': '192.168.160.11', 'etcd-mv-2': '192.168.160.12', 'etcd-mv-3': '192.168.160.13' } as const;
const ALL = Object.values(MEMBERS).map((ip) => `https://${ip}:2379`);
const ROOT: Identity = {
  caCert: join(STATE, 'pki/ca.crt'),
  cert: join(STATE, 'pki/clients/root.crt'),
  key: join(STATE, 'pki/clients/root.key'),
};
/** etcdctl from the client namespace, where the tool runs. */
const fromClient = (endpoints: string[], args: string[], identity = ROOT) => etcdctl(endpoints, identity, args, CLIENT_NAMESPACE);

function deployed(t: { log: (...values: unknown[]) => void }, args: string[] = [], inventory = INVENTORY): DeployRun {
  const started = Date.now();
  const result = deploy(['-i', inventory, ...args], join(STATE, 'e2e-report.json'), CLIENT_NAMESPACE);
  t.log(`deploy ${args.join(' ')} from ${CLIENT_NAMESPACE}: exit ${result.status} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  if (result.status !== 0) t.log(result.output.slice(-4000));
  return result;
}

test.before((t) => freshLab(t, STATE));
test.after.always(() => labRemoved(STATE));

scenario(
  'a cluster on macvtap NICs, deployed from another machine on the segment: healthy, peers over macvtap, unreachable from its own hypervisor',
  (t) => {
    const cold = deployed(t);
    t.is(cold.status, 0);

    // Each running domain has one NIC: a macvtap device in bridge mode on the host interface.
    for (const name of Object.keys(MEMBERS)) {
      const xml = virsh(['dumpxml', name]).stdout;
      t.regex(
        xml,
        /<interface type='direct'>\s*<mac address='52:54:00:16:00:1\d'\/>\s*<source dev='etcdlab-mv0' mode='bridge'\/>\s*<target dev='macvtap\d+'\/>/,
        name,
      );
      t.is(xml.match(/<interface /g)?.length, 1, name);
    }

    // Peers found each other over the macvtap bridge; clients reach every member from the segment.
    const list = fromClient(ALL, ['member', 'list', '-w', 'json']);
    t.is(list.status, 0, list.stderr);
    const members = (JSON.parse(list.stdout) as { members: { name: string; peerURLs: string[] }[] }).members;
    t.deepEqual(
      members.map((member) => [member.name, member.peerURLs]).sort(),
      Object.entries(MEMBERS).map(([name, ip]) => [name, [`https://${ip}:2380`]]),
    );
    const endpoints = fromClient(ALL, ['endpoint', 'health']);
    t.is((endpoints.stdout + endpoints.stderr).match(/is healthy/g)?.length, 3, endpoints.stderr);
    t.is(fromClient([ALL[0]!], ['put', 'e2e/macvtap', 'over macvtap']).status, 0);
    t.is(fromClient([ALL[2]!], ['get', '--print-value-only', 'e2e/macvtap']).stdout.trim(), 'over macvtap');
    // Authentication is on: the CA alone (no client certificate, no user) is refused.
    t.not(fromClient([ALL[1]!], ['get', 'e2e/macvtap'], { caCert: ROOT.caCert }).status, 0);

    // The documented limitation, for real: the same request that works from the segment gets no answer
    // from the hypervisor's own namespace.
    const health = [
      '--silent',
      '--show-error',
      '--max-time',
      '5',
      '--cacert',
      ROOT.caCert,
      '--cert',
      ROOT.cert!,
      '--key',
      ROOT.key!,
      `${ALL[0]!}/health`,
    ];
    t.regex(run('ip', ['netns', 'exec', CLIENT_NAMESPACE, 'curl', ...health]).stdout, /"health":\s*"true"/);
    const fromHypervisor = inLab('curl', health);
    t.not(fromHypervisor.status, 0, 'the hypervisor reached its own macvtap guest');
    t.log(`from the hypervisor: ${fromHypervisor.stderr.trim()}`);

    const again = deployed(t);
    t.is(again.status, 0);
    t.deepEqual(
      again.report.results.filter((r) => r.status !== 'ok').map((r) => `${r.host}/${r.step}`),
      [],
    );
  },
);

scenario(
  'pki.intermediate on the lab: every member and client certificate verifies through the intermediate to the CA, and a member serves the chain',
  (t) => {
    const pki = join(STATE, 'pki');
    const leaves = [...Object.keys(MEMBERS).map((name) => `members/${name}.crt`), 'clients/root.crt'];
    for (const leaf of leaves) {
      const verified = run('openssl', [
        'verify',
        '-CAfile',
        join(pki, 'ca.crt'),
        '-untrusted',
        join(pki, 'intermediate.crt'),
        join(pki, leaf),
      ]);
      t.is(verified.status, 0, `${leaf}: ${verified.stderr}`);
    }
    const [host, port] = [MEMBERS['etcd-mv-2'], '2379'];
    const handshake = run(
      'ip',
      [
        'netns',
        'exec',
        CLIENT_NAMESPACE,
        'openssl',
        's_client',
        '-connect',
        `${host}:${port}`,
        '-CAfile',
        ROOT.caCert,
        '-cert',
        ROOT.cert!,
        '-key',
        ROOT.key!,
        '-showcerts',
      ],
      { input: '' },
    );
    t.regex(handshake.stdout, /Verify return code: 0 \(ok\)/);
    // The chain as served: the member's certificate, then the intermediate.
    t.regex(handshake.stdout, /0 s:.*CN ?= ?etcd-mv-2[\s\S]*1 s:.*CN ?= ?lab-macvtap etcd intermediate CA/);
    t.is(handshake.stdout.match(/BEGIN CERTIFICATE/g)?.length, 2);
  },
);

scenario(
  '--rotate-ca cluster with pki.intermediate: to the pause, then on to the end; every leaf then chains through a new intermediate to a new CA, the old CA refused, the next run changes nothing',
  (t) => {
    const pki = join(STATE, 'pki');
    const before = { ca: readFileSync(join(pki, 'ca.crt'), 'utf8'), intermediate: readFileSync(join(pki, 'intermediate.crt'), 'utf8') };
    const kept = mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-rotation-'));
    try {
      for (const file of ['ca.crt', 'clients/root.crt', 'clients/root.key']) cpSync(join(pki, file), join(kept, file.replace('/', '_')));
      const paused = deployed(t, ['--rotate-ca', 'cluster']);
      t.is(paused.status, 0);
      t.regex(paused.output, /the rotation of the cluster CA pauses here/);
      const ended = deployed(t, ['--rotate-ca', 'cluster']);
      t.is(ended.status, 0);
      t.regex(ended.output, /the rotation of the cluster CA ended/);
      t.not(readFileSync(join(pki, 'ca.crt'), 'utf8'), before.ca);
      t.not(readFileSync(join(pki, 'intermediate.crt'), 'utf8'), before.intermediate);
      for (const leaf of [...Object.keys(MEMBERS).map((name) => `members/${name}.crt`), 'clients/root.crt']) {
        const verified = run('openssl', [
          'verify',
          '-CAfile',
          join(pki, 'ca.crt'),
          '-untrusted',
          join(pki, 'intermediate.crt'),
          join(pki, leaf),
        ]);
        t.is(verified.status, 0, `${leaf}: ${verified.stderr}`);
      }
      t.is(fromClient(ALL, ['put', 'e2e/rotated', 'after the rotation']).status, 0);
      const oldRoot = { caCert: ROOT.caCert, cert: join(kept, 'clients_root.crt'), key: join(kept, 'clients_root.key') };
      t.not(fromClient([ALL[0]!], ['get', 'e2e/rotated'], oldRoot).status, 0, "root's certificate of the old CA is refused");
      t.not(
        fromClient([ALL[0]!], ['get', 'e2e/rotated'], { ...ROOT, caCert: join(kept, 'ca.crt') }).status,
        0,
        'the old CA no longer verifies the members',
      );
      const again = deployed(t);
      t.deepEqual(
        again.report.results.filter((r) => r.status !== 'ok').map((r) => `${r.host}/${r.step}`),
        [],
      );
    } finally {
      rmSync(kept, { recursive: true, force: true });
    }
  },
);

/** The image a member's OS disk is an overlay on, as libvirt says (its backing file's name). */
const backingImage = (member: string) =>
  /<backingStore>[\s\S]*?<path>[^<]*\/([^/<]+)<\/path>/.exec(
    virsh(['vol-dumpxml', '--pool', 'etcd-lab', `${member}-os.qcow2`]).stdout,
  )?.[1];

/** Each member's ID and whether it is a learner, by name, from etcd's member list. */
function membersByName(): Record<string, string> {
  const list = fromClient(ALL, ['member', 'list', '-w', 'json']);
  const { members } = JSON.parse(list.stdout) as { members: { name: string; ID: string; isLearner?: boolean }[] };
  return Object.fromEntries(members.map((m) => [m.name, `${BigInt(m.ID).toString(16)}${m.isLearner ? ' (learner)' : ''}`]));
}

// Last: it leaves etcd-mv-2 on the lab's second image.
scenario(
  'a new base image on a member without a data disk: replaced on it (leaves, joins again empty, promoted), its host key kept, its data from the cluster, the others untouched',
  (t) => {
    // etcd-mv-2 alone onto the second image: one replacement proves the path (the order of several is the plan's table).
    const moved = 'inventories/.e2e-macvtap-image.yaml';
    const text = readFileSync(INVENTORY, 'utf8');
    const withImage = text.replace(
      /( {2}- name: etcd-mv-2\n)/,
      `$1    base_image: { pool: ${LAB.pools.images}, volume: ${LAB.secondBaseVolume} }\n`,
    );
    t.not(withImage, text);
    writeFileSync(moved, withImage);
    try {
      t.is(fromClient(ALL, ['put', 'e2e/image', 'written before the replacement']).status, 0);
      const before = membersByName();
      t.is(backingImage('etcd-mv-2'), LAB.baseVolume);

      const dry = deployed(t, ['--dry-run'], moved);
      t.is(dry.status, 0, dry.output.slice(-1500));
      t.regex(dry.output, /replace: would remove etcd-mv-2 from the cluster \(member ID [0-9a-f]+\); it joins again empty/);
      t.is(backingImage('etcd-mv-2'), LAB.baseVolume, 'untouched by the dry-run');

      const result = deployed(t, [], moved);
      t.is(result.status, 0, result.output.slice(-1500));
      t.deepEqual(
        result.report.results
          .filter((r) => r.status === 'changed' && ['replace', 'add', 'promote'].includes(r.step))
          .map((r) => `${r.host}/${r.step}`),
        ['etcd-mv-2/replace', 'etcd-mv-2/add', 'etcd-mv-2/promote'],
      );
      t.is(backingImage('etcd-mv-2'), LAB.secondBaseVolume);
      for (const member of ['etcd-mv-1', 'etcd-mv-3']) t.is(backingImage(member), LAB.baseVolume, member);

      // A new member ID for etcd-mv-2, a voter again; the others' IDs as they were.
      const after = membersByName();
      t.not(after['etcd-mv-2'], before['etcd-mv-2']);
      t.regex(after['etcd-mv-2']!, /^[0-9a-f]+$/);
      t.deepEqual([after['etcd-mv-1'], after['etcd-mv-3']], [before['etcd-mv-1'], before['etcd-mv-3']]);
      // Its own copy of the data (a serializable read answers from the member's store), taken from the cluster.
      const local = fromClient([ALL[1]!], ['get', '--consistency=s', '--print-value-only', 'e2e/image']);
      t.is(local.stdout.trim(), 'written before the replacement', local.stderr);
      // The new image's mark, over SSH from the segment with the state directory's known_hosts, strictly: the host key kept.
      const ssh = run('ip', [
        'netns',
        'exec',
        CLIENT_NAMESPACE,
        'ssh',
        '-o',
        'BatchMode=yes',
        '-o',
        'StrictHostKeyChecking=yes',
        '-o',
        `UserKnownHostsFile=${join(STATE, 'ssh/known_hosts')}`,
        '-i',
        join(STATE, 'ssh/admin.key'),
        `admin@${MEMBERS['etcd-mv-2']}`,
        `cat ${LAB.secondImageMark.path}`,
      ]);
      t.is(ssh.stdout.trim(), LAB.secondImageMark.line, ssh.stderr);

      const again = deployed(t, [], moved);
      t.is(again.status, 0, again.output.slice(-1500));
      t.deepEqual(
        again.report.results.filter((r) => r.status !== 'ok').map((r) => `${r.host}/${r.step}`),
        [],
      );
    } finally {
      rmSync(moved, { force: true });
    }
  },
);
