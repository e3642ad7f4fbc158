/**
 * Node process warnings the tool knows to be noise, kept out of an operator's output; every other
 * warning is printed as Node would.
 *
 * DEP0123 (a TLS server name that is an IP address): etcd3's authenticator opens its own gRPC channel
 * for Authenticate without the channel options the tool passes (which name the member, a DNS SAN of
 * its certificate), so in password mode its server name is the endpoint's IP. The certificate carries
 * that IP as a SAN and verification is unaffected.
 */

import { forDisplay } from './display.ts';

const KNOWN_NOISE = new Set(['DEP0123']);

export function isKnownNoise(warning: Error & { code?: string }): boolean {
  return warning.code !== undefined && KNOWN_NOISE.has(warning.code);
}

export function silenceKnownWarnings(): void {
  // Node prints warnings from its own 'warning' listener; replace it with one that skips the noise.
  process.removeAllListeners('warning');
  process.on('warning', (warning: Error & { code?: string }) => {
    // A warning's message may quote what a peer sent (a TLS name, a header): made safe to print.
    if (!isKnownNoise(warning))
      process.stderr.write(
        `${forDisplay(`(node:${process.pid}) ${warning.code ? `[${warning.code}] ` : ''}${warning.name}: ${warning.message}`)}\n`,
      );
  });
}
