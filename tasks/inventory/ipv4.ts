/** IPv4 arithmetic for validation and rendering; addresses are handled as 32-bit unsigned integers. */

const OCTET = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

export function isIPv4(text: string): boolean {
  const parts = text.split('.');
  return parts.length === 4 && parts.every((part) => OCTET.test(part));
}

export function ipv4ToInt(text: string): number {
  if (!isIPv4(text)) throw new Error(`${text} is not an IPv4 address`);
  return text.split('.').reduce((acc, part) => acc * 256 + Number(part), 0);
}

function maskOf(prefixLength: number): number {
  return prefixLength === 0 ? 0 : (0xffffffff << (32 - prefixLength)) >>> 0;
}

export function networkOf(ip: string, prefixLength: number): number {
  return (ipv4ToInt(ip) & maskOf(prefixLength)) >>> 0;
}

export function sameSubnet(a: string, b: string, prefixLength: number): boolean {
  return networkOf(a, prefixLength) === networkOf(b, prefixLength);
}

/** True when the address is the network or broadcast address of its prefix (unusable for a host). */
export function isNetworkOrBroadcast(ip: string, prefixLength: number): boolean {
  if (prefixLength >= 31) return false;
  const value = ipv4ToInt(ip);
  const network = networkOf(ip, prefixLength);
  const broadcast = (network | (~maskOf(prefixLength) >>> 0)) >>> 0;
  return value === network || value === broadcast;
}
