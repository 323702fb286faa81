// Retry timing shared by the queue consumers and the goods' outbox.

/** Cloudflare Queues cap a message's delay (send or retry) at 12 hours. */
export const MAX_DELAY_SECONDS = 43_200;

/** Seconds to wait before retry number `attempt` (1-based): base, 2 base, 4 base, ... capped. */
export function backoffSeconds(attempt: number, capSeconds = 300, baseSeconds = 1): number {
  return Math.min(capSeconds, baseSeconds * 2 ** Math.min(30, Math.max(0, attempt - 1)));
}

/** A delay a queue accepts: at least `min`, at most MAX_DELAY_SECONDS. */
export function queueDelay(seconds: number, min = 0): number {
  return Math.min(MAX_DELAY_SECONDS, Math.max(min, seconds));
}
