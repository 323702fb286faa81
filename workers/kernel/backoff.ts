// Retry timing shared by the queue consumers and the goods' outbox.

/** Cloudflare Queues cap a message's delay (send or retry) at 12 hours. */
export const MAX_DELAY_SECONDS = 43_200;

/** Seconds to wait before retry number `attempt` (1-based): 1, 2, 4, ... capped. */
export function backoffSeconds(attempt: number, capSeconds = 300): number {
  return Math.min(capSeconds, 2 ** Math.max(0, attempt - 1));
}

/** A delay a queue accepts: at least `min`, at most MAX_DELAY_SECONDS. */
export function queueDelay(seconds: number, min = 0): number {
  return Math.min(MAX_DELAY_SECONDS, Math.max(min, seconds));
}
