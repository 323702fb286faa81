/**
 * How long the edge waits for an object's answer to a call made for its own upkeep (a guard
 * report, a limits copy, an admission share): a call that never answers would otherwise hold
 * the upkeep it belongs to for good, as one had held a waiting-room shard's line.
 */
export const UPKEEP_CALL_MS = 3_000;

/** An object's answer to `call`, or the error that `what` did not answer within `ms`. */
export function callWithin<T>(call: Promise<T>, what: string, ms = UPKEEP_CALL_MS): Promise<T> {
  return within(call, ms, () => new Error(`${what} did not answer within ${ms} ms`));
}

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
