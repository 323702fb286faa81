// The stock object's held result reads (durable-objects/goods-stock/result-waiters.ts) at their
// bound: an object holds at most MAX_HELD_READS at once (what the bench's held-read phase
// measured to fit an isolate's memory), and a read past it answers at once, never lost.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MAX_HELD_READS, ResultWaiters } from '../../durable-objects/goods-stock/result-waiters';
import type { ResultView } from '../../workers/kernel/contract';

/** A store of results by request id: every request QUEUED until `finish` makes it SUCCESS. */
function results() {
  const done = new Set<string>();
  const read = (requestId: string): ResultView => ({
    requestId,
    userId: `shopper-${requestId}`,
    status: done.has(requestId) ? 'SUCCESS' : 'QUEUED',
    ...(done.has(requestId) ? { orderId: `order-${requestId}` } : {}),
  });
  const finish = (ids: string[]) => {
    for (const id of ids) {
      done.add(id);
    }
  };
  return { read, finish };
}

const isPromise = (value: unknown): value is Promise<unknown> => value instanceof Promise;

describe('held result reads at the bound', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it(`holds ${MAX_HELD_READS} reads at once, answers the next at once, and wakes them all on the commit`, async () => {
    vi.useFakeTimers();
    const store = results();
    const waiters = new ResultWaiters(store.read);
    const ids = Array.from({ length: MAX_HELD_READS + 1 }, (_, i) => `r${i}`);
    const answers = ids.map((id) => waiters.answer(id, { ms: 10_000, userId: `shopper-${id}` }));
    expect(answers.slice(0, MAX_HELD_READS).every(isPromise)).toBe(true);
    // Past the bound: the answer as it stands, not held.
    expect(answers[MAX_HELD_READS]).toMatchObject({ requestId: `r${MAX_HELD_READS}`, status: 'QUEUED' });
    expect(waiters.size).toBe(MAX_HELD_READS);

    store.finish(ids);
    waiters.wake(ids);
    const woken = await Promise.all(answers.slice(0, MAX_HELD_READS));
    expect(woken.every((v) => v?.status === 'SUCCESS')).toBe(true);
    expect(waiters.size).toBe(0);
    // Room again once they are answered.
    expect(isPromise(waiters.answer('later', { ms: 10_000, userId: 'shopper-later' }))).toBe(true);
    expect(waiters.size).toBe(1);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(waiters.size).toBe(0);
  });
});
