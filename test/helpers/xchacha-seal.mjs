// One XChaCha20-Poly1305 encryption for test/helpers/agent-harness.py, which stands in for PyNaCl on a
// control node without it: {message, nonce, key} in hex on stdin, the sealed bytes in hex on stdout.
import { xchacha20poly1305 } from '@noble/ciphers/chacha';

let input = '';
for await (const piece of process.stdin) input += piece;
const { message, nonce, key } = JSON.parse(input);
const hex = (text) => Uint8Array.from(Buffer.from(text, 'hex'));
process.stdout.write(Buffer.from(xchacha20poly1305(hex(key), hex(nonce)).encrypt(hex(message))).toString('hex'));
