// One XChaCha20-Poly1305 encryption (or, with `open`, decryption) for test/helpers/agent-harness.py, which stands
// in for PyNaCl on a control node without it: {message, nonce, key, open?} in hex on stdin, the result in hex on
// stdout; a ciphertext that does not authenticate exits 1.
import { xchacha20poly1305 } from '@noble/ciphers/chacha';

let input = '';
for await (const piece of process.stdin) input += piece;
const { message, nonce, key } = JSON.parse(input);
const hex = (text) => Uint8Array.from(Buffer.from(text, 'hex'));
const { open } = JSON.parse(input);
const cipher = xchacha20poly1305(hex(key), hex(nonce));
try {
  process.stdout.write(Buffer.from(open ? cipher.decrypt(hex(message)) : cipher.encrypt(hex(message))).toString('hex'));
} catch (error) {
  process.stderr.write(String(error));
  process.exit(1);
}
