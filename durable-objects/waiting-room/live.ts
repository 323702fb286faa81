import { z } from 'zod';
import type { RoomResult, ShopperResult, TicketView } from '../../workers/kernel/waiting-room';
import type { Standing } from './standing';
import type { RoomStorage } from './storage';

// The live channel's messages and what each connection remembers across hibernation (its
// attachment): whose it is, and what it was last told, so position updates go out only on a
// change and at most every POSITION_PUSH_MS.

/** A connection hears its position at most this often (admitted, sold out and results go at once). */
export const POSITION_PUSH_MS = 2_000;

/** The subprotocol a browser offers (with `jwt.<token>` beside it when it signs in that way). */
export const LIVE_PROTOCOL = 'seckill-live';

export type LiveEvent =
  /** The first event of a channel that joined the line as it opened (`?join=1`): the join's answer. */
  | ({ type: 'joined' } & Record<string, unknown>)
  | { type: 'position'; position: number; etaSeconds: number; remaining: number }
  | { type: 'admitted'; expiresAt: string; pass: string; round: number | null }
  /** `round`: the last admission round in effect when the room told the shopper (0: none yet). */
  | { type: 'sold_out'; remaining: number; round: number }
  | { type: 'expired' }
  | ({ type: 'result' } & RoomResult);

const Attachment = z.object({
  /** The shopper. */
  u: z.string(),
  /** The kind of the last state event sent ('' before any). */
  k: z.string(),
  /** The position and remaining stock last sent, and when. */
  p: z.number(),
  r: z.number(),
  s: z.number(),
});
export type Attachment = z.infer<typeof Attachment>;

export function userTag(userId: string): string {
  return `u:${userId}`;
}

/** A new live connection of `userId`, accepted for hibernation: the socket to send on, and the 101 to answer the upgrade with. */
export function acceptLive(ctx: DurableObjectState, request: Request, userId: string): { server: WebSocket; answer: Response } {
  const pair = new WebSocketPair();
  const [client, server] = [pair[0], pair[1]];
  ctx.acceptWebSocket(server, [userTag(userId)]);
  server.serializeAttachment({ u: userId, k: '', p: -1, r: -1, s: 0 });
  const offered = (request.headers.get('sec-websocket-protocol') ?? '').split(',').map((p) => p.trim());
  const headers: Record<string, string> = offered.includes(LIVE_PROTOCOL) ? { 'sec-websocket-protocol': LIVE_PROTOCOL } : {};
  return { server, answer: new Response(null, { status: 101, webSocket: client, headers }) };
}

export function attachmentOf(ws: WebSocket): Attachment | undefined {
  const parsed = Attachment.safeParse(ws.deserializeAttachment());
  return parsed.success ? parsed.data : undefined;
}

/** The state event a ticket's view is told as, `round` being the last admission round in effect. */
export function stateEvent(view: TicketView, round: number): LiveEvent {
  switch (view.state) {
    case 'ADMITTED':
      return { type: 'admitted', expiresAt: new Date(view.expiresAt ?? 0).toISOString(), pass: view.pass ?? '', round: view.round };
    case 'SOLD_OUT':
      return { type: 'sold_out', remaining: view.remaining, round };
    case 'EXPIRED':
      return { type: 'expired' };
    default:
      return { type: 'position', position: view.position, etaSeconds: view.etaSeconds, remaining: view.remaining };
  }
}

export function resultEvent(result: RoomResult): LiveEvent {
  return { type: 'result', ...result };
}

/** Sends one event; a connection that went away meanwhile is simply skipped. */
export function send(ws: WebSocket, event: LiveEvent): boolean {
  try {
    ws.send(JSON.stringify(event));
    return true;
  } catch {
    return false;
  }
}

/**
 * Whether a state event is due on a connection: a new kind at once; the same position event
 * only when something in it changed and POSITION_PUSH_MS have passed.
 */
export function due(att: Attachment, event: LiveEvent, now: number): boolean {
  if (att.k !== event.type) {
    return true;
  }
  if (event.type !== 'position') {
    return false;
  }
  return (event.position !== att.p || event.remaining !== att.r) && now - att.s >= POSITION_PUSH_MS;
}

/** The attachment after sending `event`. */
export function sent(att: Attachment, event: LiveEvent, now: number): Attachment {
  if (event.type === 'position') {
    return { ...att, k: event.type, p: event.position, r: event.remaining, s: now };
  }
  if (event.type === 'sold_out') {
    return { ...att, k: event.type, r: event.remaining, s: now };
  }
  return { ...att, k: event.type, s: now };
}

/**
 * Settled purchases from the order consumer: kept for a reconnect (a shopper this shard knows,
 * or one connected here) and pushed to their connections. Returns the events sent.
 */
export function pushResults(ctx: DurableObjectState, s: Standing, store: RoomStorage, list: ShopperResult[], now: number): number {
  let delivered = 0;
  for (const { userId, ...result } of list) {
    const sockets = ctx.getWebSockets(userTag(userId));
    if (!s.book.byUser.has(userId) && sockets.length === 0) {
      continue;
    }
    s.results.set(userId, { result, at: now });
    store.saveResult(userId, result, now);
    for (const ws of sockets) {
      if (send(ws, resultEvent(result))) {
        delivered++;
      }
    }
  }
  return delivered;
}
