import type { Path, Problem } from './problems.ts';

/**
 * The S3 settings parsed for what they are, before they become request URLs, object keys and files in every
 * member: an endpoint is an http(s) URL with a host and nothing else that would travel or leak (no
 * credentials in it, no query, no fragment); a bucket is a name S3 accepts; an object prefix is a key prefix
 * that stays one (no leading '/', no empty, '.' or '..' segment, no '?', '#' or control character, room left
 * for the names under it); a region is a region's name.
 */

export interface S3Values {
  endpoint: string;
  bucket: string;
  object_prefix: string;
  region: string;
}

/** How a URL field is checked: what to say for credentials in it, whether it may have a query, and an example. */
export interface UrlRules {
  example: string;
  /** Where credentials in the URL would end up, in clear. */
  credentialsGo: string;
  credentialsHint: string;
  query: boolean;
}

/**
 * What a URL the inventory gives must not carry, or undefined when it is sound: an http(s) URL with a host, no
 * credentials in its user-info (they would be written out or printed in clear), no fragment, and a query only
 * where its field allows one. Never echoes the URL: it may hold credentials.
 */
export function urlProblem(
  text: string,
  rules: UrlRules,
  notAUrlHint = `e.g. ${rules.example}`,
): { message: string; hint: string } | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return { message: 'is not a URL', hint: notAUrlHint };
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:')
    return { message: `has the scheme ${url.protocol.replace(/:$/, '')}, not http or https`, hint: `e.g. ${rules.example}` };
  if (url.username || url.password)
    return {
      message: `carries credentials in its user-info (the URL is not shown): they would be ${rules.credentialsGo} in clear`,
      hint: rules.credentialsHint,
    };
  if (!url.hostname) return { message: 'has no host', hint: `e.g. ${rules.example}` };
  if (!rules.query && (url.search || text.includes('?')))
    return { message: 'has a query', hint: 'give the endpoint alone; requests add their own' };
  if (url.hash || text.includes('#')) return { message: 'has a fragment', hint: 'give the endpoint alone' };
  return undefined;
}

/** What an S3 endpoint URL must not carry, or undefined when it is sound. */
export const endpointProblem = (endpoint: string) =>
  urlProblem(
    endpoint,
    {
      example: 'https://s3.example.org',
      credentialsGo: 'written into every member',
      credentialsHint: 'give the keys in restore.s3.access_key and restore.s3.secret_key, and the endpoint without them',
      query: false,
    },
    'e.g. https://s3.eu-west-1.amazonaws.com or http://10.0.0.5:9000',
  );

// S3's bucket naming rules: 3 to 63 lowercase letters, digits, dots and hyphens, a letter or digit at each end.
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const IPV4_LIKE = /^\d+\.\d+\.\d+\.\d+$/;
const REGION = /^[a-z0-9][a-z0-9-]{0,62}$/;
/** S3 keys are at most 1024 bytes; the names under a prefix add `-<timestamp>.manifest` (~30). */
const MAX_PREFIX_BYTES = 900;
const CONTROL = /[\u0000-\u001f\u007f]/;

function prefixProblem(prefix: string): { message: string; hint: string } | undefined {
  const hint = 'a key prefix such as "etcd/prod" (spaces, "+" and letters of any script are fine)';
  if (Buffer.byteLength(prefix) > MAX_PREFIX_BYTES)
    return { message: `is ${Buffer.byteLength(prefix)} bytes: S3 keys are at most 1024, and the names under it need room`, hint };
  if (CONTROL.test(prefix)) return { message: 'has a control character', hint };
  if (/[?#\\]/.test(prefix)) return { message: "has '?', '#' or '\\', which a key prefix must not", hint };
  if (prefix.startsWith('/')) return { message: "starts with '/'", hint };
  const segments = prefix.split('/');
  if (segments.some((segment, i) => segment === '..' || segment === '.' || (segment === '' && i < segments.length - 1)))
    return { message: "has an empty, '.' or '..' segment", hint };
  return undefined;
}

/** Every problem of one set of S3 settings, each at its field under `at`; empty values are the caller's (required or not). */
export function s3ValueProblems(values: S3Values, at: Path): Problem[] {
  const found: [keyof S3Values, { message: string; hint: string } | undefined][] = [
    ['endpoint', values.endpoint ? endpointProblem(values.endpoint) : undefined],
    [
      'bucket',
      values.bucket && (!BUCKET.test(values.bucket) || values.bucket.includes('..') || IPV4_LIKE.test(values.bucket))
        ? {
            message: `${JSON.stringify(values.bucket)} is not an S3 bucket name`,
            hint: '3 to 63 lowercase letters, digits, dots and hyphens, a letter or digit at each end, not an IP address',
          }
        : undefined,
    ],
    ['object_prefix', values.object_prefix ? prefixProblem(values.object_prefix) : undefined],
    [
      'region',
      values.region && !REGION.test(values.region)
        ? { message: `${JSON.stringify(values.region)} is not a region's name`, hint: 'e.g. us-east-1 or eu-central-1; empty: us-east-1' }
        : undefined,
    ],
  ];
  return found.flatMap(([field, problem]) => (problem ? [{ path: [...at, field], ...problem }] : []));
}
