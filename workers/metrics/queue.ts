import { observe } from './registry';

/** Records, per message, how long it waited between being sent and its consumer starting. */
export function observeQueueLag(queue: string, messages: readonly Message<unknown>[], now = Date.now()): void {
  for (const m of messages) {
    observe('seckill_queue_lag_ms', { queue }, Math.max(0, now - m.timestamp.getTime()));
  }
}
