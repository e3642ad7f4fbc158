/**
 * Runs `call` again, after `pauseMs`, while it fails with an error `shouldRetry` accepts, for at most
 * `windowMs`; the last error, or any other, is thrown.
 */
export async function retryWhile<T>(
  call: () => Promise<T>,
  shouldRetry: (error: unknown) => boolean,
  { windowMs, pauseMs }: { windowMs: number; pauseMs: number },
): Promise<T> {
  const deadline = Date.now() + windowMs;
  for (;;) {
    try {
      return await call();
    } catch (error) {
      if (!shouldRetry(error) || Date.now() + pauseMs > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, pauseMs));
    }
  }
}
