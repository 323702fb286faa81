import { PACK_ORDERS_MAX } from '../../workers/kernel/contract';

// How the outbox's due rows become order packs and sendBatch calls. Apart from the object (no
// runtime types), so the limits are tested under Node.

/** The queue's limits on one sendBatch (100 messages, 256 KB), with room for the envelope. */
const SEND_BATCH_MAX = 100;
const SEND_BATCH_BYTES_MAX = 192 * 1024;
/** A pack's bodies at most (the queue takes 128 KB a message). */
const PACK_BYTES_MAX = 48 * 1024;

/** One sendBatch: its packs (each a list of rows) and all their rows, in order. */
export type Send<R> = { packs: R[][]; rows: R[] };

/**
 * Splits due rows into order packs within the queue's limits: a pack holds at most
 * PACK_ORDERS_MAX orders and PACK_BYTES_MAX of bodies, a sendBatch at most SEND_BATCH_MAX
 * messages and SEND_BATCH_BYTES_MAX. Pure, so the limits are tested without a queue.
 */
export function sendsOf<R extends { body: string }>(rows: readonly R[]): Send<R>[] {
  const sends: Send<R>[] = [];
  let send: Send<R> = { packs: [], rows: [] };
  let sendBytes = 0;
  let pack: R[] = [];
  let packBytes = 0;
  const closePack = () => {
    if (pack.length === 0) {
      return;
    }
    if (send.packs.length >= SEND_BATCH_MAX || sendBytes + packBytes > SEND_BATCH_BYTES_MAX) {
      sends.push(send);
      send = { packs: [], rows: [] };
      sendBytes = 0;
    }
    send.packs.push(pack);
    send.rows.push(...pack);
    sendBytes += packBytes;
    pack = [];
    packBytes = 0;
  };
  for (const row of rows) {
    // The body's length in UTF-16 units is its size in bytes for the ASCII the contract allows.
    const bytes = row.body.length + 1;
    if (pack.length >= PACK_ORDERS_MAX || packBytes + bytes > PACK_BYTES_MAX) {
      closePack();
    }
    pack.push(row);
    packBytes += bytes;
  }
  closePack();
  if (send.packs.length > 0) {
    sends.push(send);
  }
  return sends;
}
