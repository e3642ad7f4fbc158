/** What etcd's auth API answers when the thing asked about is absent, or already as wanted. */

export const notFound = (error: unknown): boolean => error instanceof Error && /not found/i.test(error.message);

/** A retried call may find its own earlier attempt already applied: that answer is success. */
export const ignoreIf = (already: RegExp) => (error: unknown) => {
  if (!(error instanceof Error && already.test(error.message))) throw error;
};
