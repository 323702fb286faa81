import { z } from 'zod';
import { openBlob, sealBlob } from './sealed';
import type { RoomGoods, TicketView } from './waiting-room';

// The waiting room's two signed blobs, `base64url(json).base64url(hmac)` under the token secret,
// domain-separated from the purchase tokens and challenges (workers/edge/signed.ts):
//  - the ticket names a shopper's place (goods, user, ticket id): it authenticates the live
//    channel and the status route, so the edge reaches the right shard without a lookup;
//  - the admission pass says "admitted until e": the token route checks it with no object call.

const seal = sealBlob;
const open = <T>(secret: string, purpose: string, blob: string, schema: z.ZodType<T>) => openBlob(secret, purpose, blob, schema, 512);

const TicketPayload = z.object({ g: z.number(), u: z.string(), i: z.string() });
export type RoomTicket = { goodsId: number; userId: string; ticketId: string };

/** The shopper's signed ticket. `ticketId` is empty when the goods has no queue (the live channel still hears results). */
export function sealTicket(secret: string, t: RoomTicket): Promise<string> {
  return seal(secret, 'room-ticket', { g: t.goodsId, u: t.userId, i: t.ticketId });
}

/**
 * A join's answer (POST .../queue, and the `joined` event of a live channel that joined): the
 * ticket's view with its signed ticket, its instants as ISO strings, and the draw's time while a
 * pre-queue shopper's place is not known yet.
 */
export async function ticketAnswer(secret: string, goods: RoomGoods, view: TicketView) {
  const { userId: _user, expiresAt, admittedAt, ...rest } = view;
  return {
    ticket: await sealTicket(secret, { goodsId: goods.goodsId, userId: view.userId, ticketId: view.ticketId }),
    ...rest,
    ...(admittedAt !== undefined ? { admittedAt: new Date(admittedAt).toISOString() } : {}),
    ...(expiresAt !== undefined ? { expiresAt: new Date(expiresAt).toISOString() } : {}),
    ...(view.preQueue && view.orderKey === null ? { drawAt: new Date(goods.startAt).toISOString() } : {}),
    queue: goods.mode,
  };
}

export async function openTicket(secret: string, blob: string): Promise<RoomTicket | undefined> {
  const p = await open(secret, 'room-ticket', blob, TicketPayload);
  return p && { goodsId: p.g, userId: p.u, ticketId: p.i };
}

const PassPayload = z.object({ g: z.number(), u: z.string(), i: z.string(), e: z.number() });
export type AdmissionPass = { goodsId: number; userId: string; ticketId: string; expiresAt: number };

/** An admission pass: this shopper may ask for purchase tokens for this goods until `expiresAt`. */
export function sealPass(secret: string, p: AdmissionPass): Promise<string> {
  return seal(secret, 'room-pass', { g: p.goodsId, u: p.userId, i: p.ticketId, e: p.expiresAt });
}

/** The pass when it is genuine, for this shopper and goods, and not expired at `now`. */
export async function verifyPass(
  secret: string,
  blob: string,
  userId: string,
  goodsId: number,
  now: number,
): Promise<AdmissionPass | undefined> {
  const p = await open(secret, 'room-pass', blob, PassPayload);
  if (!p || p.u !== userId || p.g !== goodsId || p.e <= now) {
    return undefined;
  }
  return { goodsId: p.g, userId: p.u, ticketId: p.i, expiresAt: p.e };
}
