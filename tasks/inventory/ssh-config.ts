import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import type SSHConfig from 'ssh-config';

/**
 * What an operator's ssh_config (~/.ssh/config) says about a host the inventory names, read with the
 * ssh-config package: its HostName, Port, User, first IdentityFile and UserKnownHostsFile, ProxyJump.
 * Only these are used; the inventory's own values win over them (the loader merges). `Match exec`
 * lines are never run, nor the name lookups of CanonicalizeHostName: reading an inventory runs no command.
 */

export interface SshConfigEntry {
  hostName?: string;
  port?: number;
  user?: string;
  identityFile?: string;
  knownHosts?: string;
  /** Jump hosts in order, each `[user@]host[:port]`, as ProxyJump lists them. */
  proxyJump?: string[];
}

export type SshConfigFile = SSHConfig;

/**
 * The library canonicalizes a host name (CanonicalizeHostName with two or more CanonicalDomains) by
 * running nslookup for each domain while it computes an entry. Reading configuration runs nothing, so
 * these directives are dropped: a host is looked up by the name the inventory gives, as with Match exec.
 */
const CANONICALIZATION = /^(CanonicalizeHostName|CanonicalDomains)$/i;

/** Removes the canonicalization directives everywhere, inside Host and Match blocks too; in place. */
function withoutCanonicalization(config: SSHConfig): SSHConfig {
  for (let i = config.length - 1; i >= 0; i--) {
    const line = config[i]!;
    if (!('param' in line)) continue;
    if (CANONICALIZATION.test(line.param)) config.splice(i, 1);
    else if ('config' in line) withoutCanonicalization(line.config);
  }
  return config;
}

/** Loaded only when there is an ssh_config to read (~17 ms at every start otherwise); the loader is synchronous. */
export const parseSshConfig = (text: string): SshConfigFile =>
  withoutCanonicalization((createRequire(import.meta.url)('ssh-config') as { default: typeof SSHConfig }).default.parse(text));

/** ssh reads paths in its config relative to the home directory, and expands a leading ~. */
function configPath(path: string): string {
  if (path === '~' || path.startsWith('~/')) return join(homedir(), path.slice(1));
  return isAbsolute(path) ? path : join(homedir(), path);
}

const first = (value: string | string[] | undefined) => (Array.isArray(value) ? value[0] : value);

export function lookUpHost(config: SshConfigFile, host: string): SshConfigEntry {
  // Directive names lowercased, as OpenSSH matches them case-insensitively.
  const computed = config.compute(host, { ignoreCase: true, matchExec: false });
  const hostName = first(computed.hostname);
  const port = first(computed.port);
  const user = first(computed.user);
  const identityFile = first(computed.identityfile);
  const knownHosts = first(computed.userknownhostsfile)?.split(/\s+/)[0];
  const proxyJump = first(computed.proxyjump);
  return {
    ...(hostName ? { hostName: hostName.replace(/%h/g, host) } : {}),
    ...(port && /^\d+$/.test(port) ? { port: Number(port) } : {}),
    ...(user ? { user } : {}),
    ...(identityFile ? { identityFile: configPath(identityFile) } : {}),
    ...(knownHosts ? { knownHosts: configPath(knownHosts) } : {}),
    ...(proxyJump && proxyJump.toLowerCase() !== 'none'
      ? {
          proxyJump: proxyJump
            .split(',')
            .map((hop) => hop.trim())
            .filter(Boolean),
        }
      : {}),
  };
}

/** One ProxyJump hop: `[user@]host[:port]` (or `[IPv6]:port`). */
export function parseJumpHop(hop: string): { user?: string; host: string; port?: number } {
  const at = hop.lastIndexOf('@');
  const user = at >= 0 ? hop.slice(0, at) : undefined;
  const rest = at >= 0 ? hop.slice(at + 1) : hop;
  const match = /^\[([^\]]+)\](?::(\d+))?$/.exec(rest) ?? /^([^:]+)(?::(\d+))?$/.exec(rest);
  const host = match?.[1] ?? rest;
  const port = match?.[2] ? Number(match[2]) : undefined;
  return { host, ...(user ? { user } : {}), ...(port ? { port } : {}) };
}
