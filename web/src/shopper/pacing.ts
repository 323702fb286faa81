// How the page paces the shopper's requests: the first layer of the seed's defences
// (button debounce, local rate limit, polite polling), kept pure so it is unit-tested.

/** Repeats within this window of an accepted click are ignored (seed: 300 ms). */
export const CLICK_WINDOW_MS = 300;
/** One purchase request per shopper per this window, from this page (seed: 5 s). */
export const LOCAL_LIMIT_MS = 5_000;
/** Poll the result every second this many times, then back off. */
export const FAST_POLLS = 10;
/**
 * Each result poll asks the server to hold a QUEUED answer this long for the final one
 * (`?wait=`): without the Redis mirror one object call covers the wait, and the answer comes
 * the moment the order is written instead of at the next poll.
 */
export const RESULT_WAIT_SECONDS = 10;
/** Past its wait a held read is given this long to answer before the page calls it lost. */
const HELD_READ_GRACE_SECONDS = 15;

/** The result route for `requestId`, asking the server to hold a QUEUED answer up to `waitSeconds` (0: a plain read). */
export function resultReadPath(requestId: string, waitSeconds = RESULT_WAIT_SECONDS): string {
  const path = `/api/seckill/result/${encodeURIComponent(requestId)}`;
  return waitSeconds > 0 ? `${path}?wait=${waitSeconds}` : path;
}

/** How long a read held up to `waitSeconds` may take in all. */
export function heldReadTimeoutMs(waitSeconds = RESULT_WAIT_SECONDS): number {
  return (waitSeconds + HELD_READ_GRACE_SECONDS) * 1000;
}

/**
 * Sends of one captcha answer to the token route while it answers 503 (BUSY, UNAVAILABLE): the
 * server answers so before it spends the challenge or after it gave it back, so the same answer
 * passes once the moment is over, and the shopper need not answer a new question.
 */
export const TOKEN_TRIES = 3;

/** The pause before sending a busy answer's request again: its Retry-After, 1 to 5 s. */
export function busyRetryDelayMs(retryAfterSeconds: number | undefined): number {
  return Math.min(5, Math.max(1, retryAfterSeconds ?? 1)) * 1000;
}

/** An answer as the busy retry reads it (the pages' ApiResult). */
type Answered = { ok: boolean; status: number; retryAfterSeconds?: number };

/**
 * Sends with `send` until the answer is not a 503 or `tries` sends were made, `pause(ms)` between
 * them (busyRetryDelayMs of the answer's Retry-After), which answers false to stop (the shopper
 * signed out meanwhile). The last answer and how many sends it took; undefined when stopped.
 */
export async function sendWhileBusy<A extends Answered>(
  send: () => Promise<A>,
  pause: (ms: number) => Promise<boolean>,
  tries = TOKEN_TRIES,
): Promise<{ answer: A; sends: number } | undefined> {
  let answer = await send();
  let sends = 1;
  for (; !answer.ok && answer.status === 503 && sends < tries; sends++) {
    if (!(await pause(busyRetryDelayMs(answer.retryAfterSeconds)))) {
      return undefined;
    }
    answer = await send();
  }
  return { answer, sends };
}

/** After this long without a final answer the page says the order is still being processed. */
export const STILL_QUEUED_AFTER_MS = FAST_POLLS * 1000;
export const MAX_POLL_DELAY_MS = 15_000;
/** After this long without an answer the page stops polling and tells the shopper to reload. */
export const POLL_GIVE_UP_MS = 5 * 60_000;

/**
 * Accepts a click only when nothing is in flight and the previous accepted click is more
 * than CLICK_WINDOW_MS ago.
 */
export class ClickGuard {
  private lastAt = Number.NEGATIVE_INFINITY;
  private inFlight = false;

  constructor(
    private readonly now: () => number = () => performance.now(),
    private readonly windowMs = CLICK_WINDOW_MS,
  ) {}

  /** True when this click may start work; the caller must `release()` when it is done. */
  tryEnter(): boolean {
    const t = this.now();
    if (this.inFlight || t - this.lastAt < this.windowMs) {
      return false;
    }
    this.lastAt = t;
    this.inFlight = true;
    return true;
  }

  release(): void {
    this.inFlight = false;
  }

  get busy(): boolean {
    return this.inFlight;
  }
}

/** Delay before result poll number `attempt` (0-based): 1 s ten times, then doubling to 15 s. */
export function resultPollDelay(attempt: number): number {
  if (attempt < FAST_POLLS) {
    return 1000;
  }
  return Math.min(MAX_POLL_DELAY_MS, 1000 * 2 ** (attempt - FAST_POLLS + 1));
}

/**
 * Pause before result poll number `attempt + 1`, the last one having taken `tookMs`: polls
 * start resultPollDelay(attempt) apart, so a poll the server held (`?wait=`) is followed at
 * once, and one answered at once (the mirror's QUEUED, an error) waits out the rest.
 */
export function resultPollPause(attempt: number, tookMs: number): number {
  return Math.max(0, resultPollDelay(attempt) - tookMs);
}

/** Remembers when the next purchase request may leave this page. */
export class LocalLimiter {
  private nextAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly now: () => number = () => Date.now(),
    private readonly windowMs = LOCAL_LIMIT_MS,
  ) {}

  /** Milliseconds to wait before the next request, 0 when it may go now. */
  waitMs(): number {
    return Math.max(0, this.nextAt - this.now());
  }

  /** Records a request that left now, or a server-imposed wait (Retry-After) that is longer. */
  note(extraWaitMs = 0): void {
    this.nextAt = Math.max(this.nextAt, this.now() + Math.max(this.windowMs, extraWaitMs));
  }

  /** Forgets the wait (the shopper may retry at once, e.g. after a wrong captcha answer). */
  reset(): void {
    this.nextAt = Number.NEGATIVE_INFINITY;
  }
}
