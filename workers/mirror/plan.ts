import {
  endKey,
  FINAL_TTL_SECONDS,
  goodsKey,
  QUEUED_TTL_SECONDS,
  type ResultValue,
  resultKey,
  resultOwnerKey,
  startKey,
  stockKey,
  stockPartsKey,
  usersKey,
  usersRebuildKey,
} from './keys';

// What to write to Redis for a change of the goods' object: pure functions from the object's
// state to a list of commands, so the layout is tested without a network and the object
// only collects changes and sends them.

/** One Redis command of a mirror write. */
export type MirrorOp =
  | { op: 'set'; key: string; value: string }
  /** SET with a lifetime; `onlyIfAbsent` is SET ... NX (an existing value is left as it is). */
  | { op: 'setex'; key: string; value: string; seconds: number; onlyIfAbsent: boolean }
  | { op: 'hset'; key: string; fields: Record<string, string> }
  | { op: 'sadd'; key: string; members: string[] }
  | { op: 'srem'; key: string; members: string[] }
  | { op: 'del'; key: string }
  | { op: 'rename'; from: string; to: string }
  /** A stock shard's own figure (field `field` of hash `parts`), and `key` set to the sum of the hash, atomically. */
  | { op: 'stockpart'; key: string; parts: string; field: string; value: string };

/** The goods' settings as the object holds them. */
export type MirrorGoods = {
  goodsId: number;
  activityId: number;
  title: string;
  priceCents: number;
  totalStock: number;
  startAt: number;
  endAt: number;
  paused: boolean;
  payTimeoutSeconds: number;
};

export type MirrorResult = { requestId: string; userId: string; value: ResultValue };

/** Everything the mirror holds for one goods, read from the object in one synchronous step. */
export type MirrorFullState = {
  goods: MirrorGoods;
  remaining: number;
  holders: string[];
  results: MirrorResult[];
  /** A stock shard of a sharded goods: its index (it writes its part of the stock and adds its holders). */
  stockPart?: string;
};

/**
 * Changes collected since the last write. Later changes replace earlier ones: the stock is
 * absolute, a user's last add/remove wins, a request's last answer wins. So replaying a
 * delta, or writing one twice, leaves the same mirror.
 */
export type MirrorDelta = {
  goods: MirrorGoods | undefined;
  stock: number | undefined;
  /** user id -> member of the holders set (true) or not (false). */
  users: Map<string, boolean>;
  results: Map<string, MirrorResult>;
};

/** SADD/SREM arguments per command, so no single command carries a huge argument list. */
const MEMBERS_PER_COMMAND = 500;

/** A delta with no changes. */
export function emptyDelta(): MirrorDelta {
  return { goods: undefined, stock: undefined, users: new Map(), results: new Map() };
}

/** True when there is nothing to write. */
export function isEmptyDelta(d: MirrorDelta): boolean {
  return d.goods === undefined && d.stock === undefined && d.users.size === 0 && d.results.size === 0;
}

/** The goods hash and the seed's separate start/end keys. */
export function goodsOps(g: MirrorGoods): MirrorOp[] {
  return [
    {
      op: 'hset',
      key: goodsKey(g.goodsId),
      fields: {
        goodsId: String(g.goodsId),
        activityId: String(g.activityId),
        title: g.title,
        priceCents: String(g.priceCents),
        totalStock: String(g.totalStock),
        startAt: String(g.startAt),
        endAt: String(g.endAt),
        paused: g.paused ? '1' : '0',
        payTimeoutSeconds: String(g.payTimeoutSeconds),
      },
    },
    { op: 'set', key: startKey(g.goodsId), value: String(g.startAt) },
    { op: 'set', key: endKey(g.goodsId), value: String(g.endAt) },
  ];
}

/**
 * A request's answer and its owner, two plain strings side by side (the seed's layout keeps the
 * answer alone under its key). QUEUED never overwrites a final answer (a late write of an
 * earlier state must not undo a later one) and keeps a short TTL; a final answer overwrites and
 * keeps a long one. The two commands are adjacent, so they always travel in one pipeline.
 */
export function resultOps(r: MirrorResult): MirrorOp[] {
  const queued = r.value === 'QUEUED';
  const seconds = queued ? QUEUED_TTL_SECONDS : FINAL_TTL_SECONDS;
  return [
    { op: 'setex', key: resultKey(r.requestId), value: r.value, seconds, onlyIfAbsent: queued },
    { op: 'setex', key: resultOwnerKey(r.requestId), value: r.userId, seconds, onlyIfAbsent: queued },
  ];
}

function chunks<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) {
    out.push(items.slice(i, i + size));
  }
  return out;
}

/** The stock write: the whole figure, or a shard's part of it. */
function stockOp(goodsId: number, remaining: number, part: string | undefined): MirrorOp {
  const value = String(remaining);
  return part === undefined
    ? { op: 'set', key: stockKey(goodsId), value }
    : { op: 'stockpart', key: stockKey(goodsId), parts: stockPartsKey(goodsId), field: part, value };
}

/** The commands for a collected delta (`part`: the writer is that stock shard of a sharded goods). */
export function deltaOps(goodsId: number, d: MirrorDelta, part?: string): MirrorOp[] {
  const ops: MirrorOp[] = [];
  if (d.goods) {
    ops.push(...goodsOps(d.goods));
  }
  if (d.stock !== undefined) {
    ops.push(stockOp(goodsId, d.stock, part));
  }
  const added: string[] = [];
  const removed: string[] = [];
  for (const [userId, member] of d.users) {
    (member ? added : removed).push(userId);
  }
  for (const members of chunks(added, MEMBERS_PER_COMMAND)) {
    ops.push({ op: 'sadd', key: usersKey(goodsId), members });
  }
  for (const members of chunks(removed, MEMBERS_PER_COMMAND)) {
    ops.push({ op: 'srem', key: usersKey(goodsId), members });
  }
  for (const r of d.results.values()) {
    ops.push(...resultOps(r));
  }
  return ops;
}

/**
 * Rewrites everything from the object's state. The holders set is built under a scratch key
 * and renamed over the live one, so a reader sees the old set or the new one, never half.
 */
export function fullOps(state: MirrorFullState): MirrorOp[] {
  const id = state.goods.goodsId;
  const ops: MirrorOp[] = [...goodsOps(state.goods), stockOp(id, state.remaining, state.stockPart)];
  if (state.stockPart !== undefined) {
    // The holders set is shared by the goods' shards: one shard can only add its own.
    for (const members of chunks(state.holders, MEMBERS_PER_COMMAND)) {
      ops.push({ op: 'sadd', key: usersKey(id), members });
    }
  } else if (state.holders.length === 0) {
    ops.push({ op: 'del', key: usersKey(id) });
  } else {
    ops.push({ op: 'del', key: usersRebuildKey(id) });
    for (const members of chunks(state.holders, MEMBERS_PER_COMMAND)) {
      ops.push({ op: 'sadd', key: usersRebuildKey(id), members });
    }
    ops.push({ op: 'rename', from: usersRebuildKey(id), to: usersKey(id) });
  }
  for (const r of state.results) {
    ops.push(...resultOps(r));
  }
  return ops;
}

/**
 * Splits commands into pipelines sent one after another (order is kept across them). A
 * request's answer and its owner are never split apart: a pipeline may run one over `size`.
 */
export function pipelines(ops: MirrorOp[], size = 200): MirrorOp[][] {
  const out: MirrorOp[][] = [];
  let current: MirrorOp[] = [];
  for (const [i, op] of ops.entries()) {
    const pairedWithPrevious = op.op === 'setex' && op.key.startsWith(resultOwnerKey('')) && ops[i - 1]?.op === 'setex';
    if (current.length >= size && !pairedWithPrevious) {
      out.push(current);
      current = [];
    }
    current.push(op);
  }
  if (current.length > 0) {
    out.push(current);
  }
  return out;
}
