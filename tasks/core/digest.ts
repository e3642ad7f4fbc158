import { createHash } from 'node:crypto';

/**
 * A content's SHA-256 in lowercase hex, as sha256sum prints it: the one digest the tool compares
 * content by (a guest's managed files, the files rendered in the state directory, the cloud-init
 * seed). A text is hashed as its UTF-8 bytes, so a file's text and the bytes read back from a guest
 * give the same digest.
 */
export const sha256 = (content: string | Uint8Array): string => createHash('sha256').update(content).digest('hex');
