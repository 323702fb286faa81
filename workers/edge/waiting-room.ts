import type { GoodsRow } from '../../db/goods';
import { roomHub, roomShard, roomShardOf } from '../../durable-objects/routing';
import type { Config } from '../kernel/config';
import { AppError } from '../kernel/errors';
import { log } from '../kernel/log';
import { openTicket, ticketAnswer, verifyPass } from '../kernel/room-seal';
import {
  DEFAULT_ADMIT_PER_SECOND,
  DEFAULT_PASS_SECONDS,
  type JoinOutcome,
  opensAt,
  QueueSettings,
  type RoomGoods,
  type RoomStats,
  readQueueSettings,
  roomShardsOf,
  type TicketView,
} from '../kernel/waiting-room';
import { callWithin } from '../kernel/within';
import { requireEligible } from './eligibility';
import { objectCall } from './object-unavailable';
import { refuseIfEnded } from './purchase';
import { readRemaining } from './stock-reads';

// The waiting room seen from the isolate: a goods' settings from its row, whether its line is
// on (for `auto`, as the room last said, refreshed in the background about once a second), and
// the calls a shopper's requests make: each one reaches the shopper's own shard and nothing else.

type WaitUntil = (promise: Promise<unknown>) => void;

/** A call to one of the goods' room objects: 503 UNAVAILABLE when it fails (objectCall). */
function roomCall<T>(goodsId: number, what: string, call: () => Promise<T>): Promise<T> {
  return objectCall('room.call_failed', { goodsId, what }, 'the waiting room is unavailable, please retry', call);
}

/** A goods' queue settings (off when the row has none or an unreadable value). */
export function queueOf(row: GoodsRow): QueueSettings {
  return readQueueSettings(row.queue);
}

/**
 * The queue settings a PUT asks for, as the goods will keep them: a `shards` the PUT leaves out
 * stays what it was, and the room's shard count changes only before the room opens (the
 * shoppers' places are in the shards their ids hash to). 409 SALE_STARTED after it, 400 when the
 * kept count cannot carry the new rate.
 */
export function nextQueueSettings(row: GoodsRow, asked: QueueSettings, now: number): QueueSettings {
  const current = queueOf(row);
  const next = asked.shards === undefined && current.shards !== undefined ? { ...asked, shards: current.shards } : asked;
  if (roomShardsOf(next) !== roomShardsOf(current) && now >= opensAt(roomGoodsOf(row))) {
    throw new AppError('SALE_STARTED', 'queue.shards can change only before the waiting room opens');
  }
  const checked = QueueSettings.safeParse(next);
  if (!checked.success) {
    throw new AppError('INVALID_INPUT', checked.error.issues[0]?.message ?? 'invalid queue settings');
  }
  return checked.data;
}

/** What the room objects are told of a goods with every call. */
export function roomGoodsOf(row: GoodsRow): RoomGoods {
  const q = queueOf(row);
  return {
    goodsId: row.id,
    locationHint: row.locationHint,
    startAt: row.startAt.getTime(),
    endAt: row.endAt.getTime(),
    paused: row.status === 1,
    mode: q.mode,
    admitPerSecond: q.admitPerSecond ?? DEFAULT_ADMIT_PER_SECOND,
    preQueueSeconds: q.preQueueSeconds ?? 0,
    passSeconds: q.passSeconds ?? DEFAULT_PASS_SECONDS,
    shards: roomShardsOf(q),
    unitsPerShopper: row.perUserLimit,
  };
}

/** Picks the shard this isolate tells its demand to (`auto`): spread over the room, one per isolate. */
const noteDraw = Math.floor(Math.random() * 2 ** 31);
function noteShardOf(goods: RoomGoods): number {
  return noteDraw % goods.shards;
}
/** An answer about the line older than this is not trusted: the next token request asks again and waits. */
const LINE_FRESH_MS = 3_000;
const NOTE_EVERY_MS = 1_000;

type Demand = { active: boolean; at: number; count: number; sentAt: number; sending: boolean };
const demand = new Map<number, Demand>();

async function note(env: Env, row: GoodsRow, d: Demand): Promise<void> {
  const n = d.count;
  d.count = 0;
  d.sending = true;
  d.sentAt = Date.now();
  try {
    const goods = roomGoodsOf(row);
    const shard = noteShardOf(goods);
    // A shard that never answers must not leave this isolate sending for good (it would neither
    // report its arrivals nor hear of the line again): after the deadline the arrivals are
    // counted again for the next note, and the late call, should it land, counts them twice,
    // an estimate's error for one note.
    const answer = await callWithin(roomShard(env, row, shard).noteArrivals(goods, shard, n), 'the room shard');
    d.active = answer.active;
    d.at = Date.now();
  } catch (error) {
    d.count += n;
    log.warn('room.note_failed', { goodsId: row.id, error });
  } finally {
    d.sending = false;
  }
}

/**
 * Whether the goods' room holds shoppers in line now, so a purchase token needs an admission
 * pass. `always`: yes; `off`: no; `auto`: what the room said at most a few seconds ago. Every
 * call counts as demand, which the isolate reports to one shard about once a second, off the
 * answer's path; only a request that finds no fresh answer waits for one.
 */
export async function lineIsOn(env: Env, row: GoodsRow, now: number, waitUntil: WaitUntil | undefined): Promise<boolean> {
  const mode = queueOf(row).mode;
  if (mode !== 'auto') {
    return mode === 'always';
  }
  let d = demand.get(row.id);
  if (!d) {
    d = { active: false, at: 0, count: 0, sentAt: 0, sending: false };
    demand.set(row.id, d);
  }
  d.count++;
  if (now - d.at > LINE_FRESH_MS && !d.sending) {
    await note(env, row, d);
  } else if (now - d.sentAt >= NOTE_EVERY_MS && !d.sending && waitUntil) {
    waitUntil(note(env, row, d));
  }
  return d.active;
}

/** 403 NOT_ADMITTED unless `pass` is this shopper's genuine, unexpired admission pass for the goods. */
export async function requirePass(config: Config, pass: string | undefined, userId: string, goodsId: number, now: number): Promise<void> {
  const ok = pass ? await verifyPass(config.tokenSecret, pass, userId, goodsId, now) : undefined;
  if (!ok) {
    throw new AppError(
      'NOT_ADMITTED',
      pass ? 'the admission pass is invalid or has expired: join the queue again' : 'this sale has a waiting room: join the queue first',
    );
  }
}

/** The HTTP answer for a ticket: the view, the signed ticket, times as ISO strings. */
function answer(config: Config, row: GoodsRow, view: TicketView) {
  return ticketAnswer(config.tokenSecret, roomGoodsOf(row), view);
}

/**
 * What every join checks first, however it comes (POST .../queue, GET .../live?join=1): the sale
 * has not ended and the line admits this shopper (403 NOT_ELIGIBLE before a ticket is made).
 */
async function checkJoin(config: Config, row: GoodsRow, userId: string, waitUntil: WaitUntil | undefined): Promise<void> {
  refuseIfEnded(row, Date.now());
  await requireEligible(config, row, userId, waitUntil);
}

/** A goods without a line admits a shopper as they are; the ticket still opens the live channel for results. */
async function noLineAnswer(env: Env, config: Config, row: GoodsRow, userId: string) {
  const remaining = (await readRemaining(env, config, [row]))[0]?.remaining ?? row.stock;
  const view: TicketView = {
    ticketId: '',
    userId,
    state: 'ADMITTED',
    position: 0,
    etaSeconds: 0,
    remaining,
    orderKey: null,
    preQueue: false,
    round: null,
  };
  return answer(config, row, view);
}

/** A join the shard refused, as the join routes answer it. */
function refusedJoin(reason: string, goods: RoomGoods): AppError {
  return reason === 'ENDED'
    ? new AppError('ENDED')
    : new AppError('NOT_STARTED', `the waiting room opens at ${new Date(opensAt(goods)).toISOString()}`);
}

/** POST .../queue: the shopper's ticket (the same one every time), from their shard. */
export async function joinRoom(env: Env, config: Config, row: GoodsRow, userId: string, waitUntil: WaitUntil | undefined) {
  await checkJoin(config, row, userId, waitUntil);
  const goods = roomGoodsOf(row);
  if (goods.mode === 'off') {
    return noLineAnswer(env, config, row, userId);
  }
  const shard = roomShardOf(userId, goods.shards);
  const outcome = await roomCall<JoinOutcome>(row.id, 'join', () => roomShard(env, row, shard).join(goods, shard, userId));
  if (!outcome.ok) {
    throw refusedJoin(outcome.reason, goods);
  }
  return answer(config, row, outcome.view);
}

/** GET .../queue/:ticket: the ticket's state now, for clients that cannot hold a connection. */
export async function ticketStatus(env: Env, config: Config, row: GoodsRow, blob: string) {
  const ticket = await openTicket(config.tokenSecret, blob);
  if (!ticket || ticket.goodsId !== row.id) {
    throw new AppError('NOT_FOUND', 'no such ticket');
  }
  const goods = roomGoodsOf(row);
  if (ticket.ticketId === '' || goods.mode === 'off') {
    throw new AppError('NOT_FOUND', 'this ticket has no place in line (the goods has no waiting room)');
  }
  const shard = roomShardOf(ticket.userId, goods.shards);
  const view = await roomCall(row.id, 'status', () => roomShard(env, row, shard).status(goods, shard, ticket.userId, ticket.ticketId));
  if (!view) {
    throw new AppError('NOT_FOUND', 'no such ticket');
  }
  return answer(config, row, view);
}

/** Who a live connection is: the ticket in the query, or else the shopper's verified user id. */
export async function ticketOwner(config: Config, row: GoodsRow, blob: string): Promise<string> {
  const ticket = await openTicket(config.tokenSecret, blob);
  if (!ticket || ticket.goodsId !== row.id) {
    throw new AppError('UNAUTHENTICATED', 'the ticket is invalid');
  }
  return ticket.userId;
}

/** Hands the live channel's upgrade to the shopper's shard. */
export function connectLive(env: Env, row: GoodsRow, userId: string, request: Request, join?: Record<string, string>): Promise<Response> {
  const goods = roomGoodsOf(row);
  const shard = roomShardOf(userId, goods.shards);
  const headers = new Headers({
    upgrade: 'websocket',
    'x-room-user': userId,
    'x-room-shard': String(shard),
    'x-room-goods': JSON.stringify(goods),
    ...join,
  });
  const protocols = request.headers.get('sec-websocket-protocol');
  if (protocols) {
    headers.set('sec-websocket-protocol', protocols);
  }
  return roomCall(row.id, 'live', () => roomShard(env, row, shard).fetch(new Request(request.url, { headers })));
}

/**
 * GET .../live?join=1: joins the line and opens the live channel in one request to the
 * shopper's shard (a join and then a connection are two): the channel's first event is the
 * join's answer, `{type: "joined", ticket, state, position, ...}` as POST .../queue answers.
 * Refused before the upgrade as the join route refuses (a room not open yet is checked here,
 * where the join route hears it from the shard).
 */
export async function joinLive(
  env: Env,
  config: Config,
  row: GoodsRow,
  userId: string,
  request: Request,
  waitUntil: WaitUntil | undefined,
) {
  await checkJoin(config, row, userId, waitUntil);
  const goods = roomGoodsOf(row);
  if (goods.mode === 'off') {
    const answer = await noLineAnswer(env, config, row, userId);
    return connectLive(env, row, userId, request, { 'x-room-joined': JSON.stringify(answer) });
  }
  if (Date.now() < opensAt(goods)) {
    throw refusedJoin('NOT_STARTED', goods);
  }
  return connectLive(env, row, userId, request, { 'x-room-join': '1' });
}

type Fairness = { seedHash: string; seed?: string; rule?: string };
/** The commitment never changes and the seed once revealed neither: an isolate asks once for each. */
const fairnessKept = new Map<number, Fairness>();

/** GET .../fairness: `{seedHash}` before the start, `{seedHash, seed, rule}` after. */
export async function fairnessOf(env: Env, row: GoodsRow, now: number): Promise<Fairness> {
  const kept = fairnessKept.get(row.id);
  if (kept && (kept.seed !== undefined || now < row.startAt.getTime())) {
    return kept;
  }
  const goods = roomGoodsOf(row);
  const shard = noteShardOf(goods);
  const found = await roomCall(row.id, 'fairness', () => roomShard(env, row, shard).fairness(goods, shard));
  if (fairnessKept.size > 1_000) {
    fairnessKept.clear();
  }
  fairnessKept.set(row.id, found);
  return found;
}

/** The stats' `queue` part: from the coordinator when the goods has a waiting room. */
export async function roomStatsOf(env: Env, row: GoodsRow): Promise<RoomStats | { mode: 'off'; waiting: 0; admittedPerSecond: 0 }> {
  const goods = roomGoodsOf(row);
  if (goods.mode === 'off') {
    return { mode: 'off', waiting: 0, admittedPerSecond: 0 };
  }
  return roomCall(row.id, 'stats', () => roomHub(env, row).roomStats(goods));
}

/**
 * Tells every shard of the goods' room its new settings (pause, resume, a PUT): shards otherwise
 * learn them from their shoppers' next calls, which a room of connected, quiet shoppers never makes.
 */
export async function pushRoomSettings(env: Env, row: GoodsRow): Promise<void> {
  const goods = roomGoodsOf(row);
  if (goods.mode === 'off') {
    return;
  }
  await Promise.all(Array.from({ length: goods.shards }, (_, shard) => roomShard(env, row, shard).configure(goods, shard)));
}

/** Makes the room's seed when a goods gets a waiting room, so the commitment exists before anyone joins. */
export async function commitSeed(env: Env, row: GoodsRow): Promise<void> {
  const goods = roomGoodsOf(row);
  if (goods.mode !== 'off') {
    await roomHub(env, row).seedInfo(goods);
  }
}
