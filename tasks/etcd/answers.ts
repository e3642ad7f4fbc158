/** What etcd's auth API answers when the thing asked about is absent, or already as wanted. */

export const notFound = (error: unknown): boolean => error instanceof Error && /not found/i.test(error.message);

/** etcd's answer, or undefined where it says the user or role asked about is not there. */
export const unlessNotFound = <T>(asked: Promise<T>): Promise<T | undefined> =>
  asked.catch((error: unknown) => (notFound(error) ? undefined : Promise.reject(error)));

/** A retried call may find its own earlier attempt already applied: that answer is success. */
export const ignoreIf = (already: RegExp) => (error: unknown) => {
  if (!(error instanceof Error && already.test(error.message))) throw error;
};
