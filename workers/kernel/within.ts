/**
 * `work`'s value, or the error `late()` makes after `ms`. The work itself goes on and what it
 * comes to is dropped: a call to an object cannot be taken back, only no longer waited for.
 */
export async function within<T>(work: Promise<T>, ms: number, late: () => Error): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(late()), ms);
  });
  try {
    return await Promise.race([work, limit]);
  } finally {
    if (timer !== undefined) {
      clearTimeout(timer);
    }
  }
}
