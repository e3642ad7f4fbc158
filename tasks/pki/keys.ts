import { createPublicKey, generateKeyPair } from 'node:crypto';
import { promisify } from 'node:util';

const generate = promisify(generateKeyPair);

/**
 * Key generation uses Node's native crypto (OpenSSL), off the main thread: node-forge's pure-JS
 * generator takes about a second per 4096-bit key here; native keys for a 3-member cluster take ~0.3 s.
 */
export async function generateRsaKey(bits: number): Promise<string> {
  const { privateKey } = await generate('rsa', {
    modulusLength: bits,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
  });
  return privateKey;
}

function sshString(data: Buffer | string): Buffer {
  const body = typeof data === 'string' ? Buffer.from(data) : data;
  const length = Buffer.alloc(4);
  length.writeUInt32BE(body.length);
  return Buffer.concat([length, body]);
}

/** The OpenSSH public key line of an ECDSA P-256 key (RFC 5656 encoding). */
export function opensshPublicKey(privateKeyPem: string, comment: string): string {
  const jwk = createPublicKey(privateKeyPem).export({ format: 'jwk' });
  if (jwk.kty !== 'EC' || jwk.crv !== 'P-256' || !jwk.x || !jwk.y) throw new Error('expected an ECDSA P-256 key');
  const point = Buffer.concat([Buffer.from([4]), Buffer.from(jwk.x, 'base64url'), Buffer.from(jwk.y, 'base64url')]);
  const blob = Buffer.concat([sshString('ecdsa-sha2-nistp256'), sshString('nistp256'), sshString(point)]);
  return `ecdsa-sha2-nistp256 ${blob.toString('base64')} ${comment}`;
}

/**
 * An SSH key pair: ECDSA P-256 in SEC1 PEM, which OpenSSH, ssh2 and cloud-init all read,
 * and which Node can create natively in a millisecond.
 */
export async function generateSshKey(comment: string): Promise<{ privatePem: string; publicLine: string }> {
  const { privateKey } = await generate('ec', {
    namedCurve: 'P-256',
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'sec1', format: 'pem' },
  });
  return { privatePem: privateKey, publicLine: opensshPublicKey(privateKey, comment) };
}
