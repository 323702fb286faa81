import { goodsStock } from './routing';
import type { ReserveItem, ReserveOutcome } from './schemas';

/**
 * The edge's one way into a goods' stock object for purchases: group commit.
 *
 * While a batch for a goods is on its way to the object, the reservations that arrive in this
 * isolate wait together and go as the next batch, in ONE `reserveMany` call and ONE SQLite
 * transaction. At low load a reservation goes alone at once (no added latency); under load the
 * batches grow by themselves, and the object does a fraction of the calls (Alibaba's hot-row
 * group commit, at the edge).
 *
 * workerd cancels a request that waits on a promise another request's I/O resolves. So nobody
 * waits on anyone's promise here: each waiting request polls its own slot on its own timer,
 * and the first of the next batch is told to send it (by its slot), rather than the sender
 * carrying on for everyone.
 */

type Slot = {
  item: ReserveItem;
  /** Set when this slot must send the next batch itself. */
  leads: boolean;
  outcome?: ReserveOutcome;
  error?: unknown;
};

type Lane = {
  /** Batches on their way to the object from this isolate. */
  inFlight: number;
  waiting: Slot[];
};

/** Largest batch in one call (one transaction); bounded so one call stays short. */
export const MAX_BATCH = 128;
/** Batches of one goods in flight at once from one isolate. */
const MAX_IN_FLIGHT = 2;
/** How often a waiting request looks at its slot. */
const POLL_MS = 1;
/** A waiting request gives up (503 BUSY) after this long; a retry with its key is safe. */
const WAIT_LIMIT_MS = 10_000;

const lanes = new Map<number, Lane>();

function laneOf(goodsId: number): Lane {
  let lane = lanes.get(goodsId);
  if (!lane) {
    lane = { inFlight: 0, waiting: [] };
    lanes.set(goodsId, lane);
  }
  return lane;
}

const tick = () => new Promise<void>((resolve) => setTimeout(resolve, POLL_MS));

/** Reserves one unit for `item`, batched with whatever else this isolate is reserving. */
export async function reserve(
  env: Env,
  goodsId: number,
  item: ReserveItem,
  locationHint?: DurableObjectLocationHint,
): Promise<ReserveOutcome> {
  const lane = laneOf(goodsId);
  const slot: Slot = { item, leads: false };
  if (lane.inFlight < MAX_IN_FLIGHT) {
    await send(env, goodsId, lane, [slot], locationHint);
  } else {
    lane.waiting.push(slot);
    const deadline = Date.now() + WAIT_LIMIT_MS;
    while (slot.outcome === undefined && slot.error === undefined) {
      // Told to lead, or first in line while a batch slot is free (a leader that went away
      // must not strand the line).
      const first = lane.waiting[0] === slot && lane.inFlight < MAX_IN_FLIGHT;
      if (slot.leads || first) {
        if (first) {
          lane.waiting.shift();
        }
        slot.leads = false;
        await send(env, goodsId, lane, [slot, ...lane.waiting.splice(0, MAX_BATCH - 1)], locationHint);
        break;
      }
      if (Date.now() > deadline) {
        const at = lane.waiting.indexOf(slot);
        if (at >= 0) {
          lane.waiting.splice(at, 1);
          throw new Error('reservation waited too long for its batch');
        }
      }
      await tick();
    }
  }
  if (slot.error !== undefined) {
    throw slot.error;
  }
  if (!slot.outcome) {
    throw new Error('reservation finished without an outcome');
  }
  return slot.outcome;
}

async function send(
  env: Env,
  goodsId: number,
  lane: Lane,
  batch: Slot[],
  locationHint: DurableObjectLocationHint | undefined,
): Promise<void> {
  lane.inFlight++;
  try {
    const outcomes = await goodsStock(env, goodsId, locationHint).reserveMany(
      goodsId,
      batch.map((s) => s.item),
    );
    batch.forEach((s, i) => {
      const outcome = outcomes[i];
      if (outcome) {
        s.outcome = outcome;
      } else {
        s.error = new Error('reserveMany returned fewer outcomes than items');
      }
    });
  } catch (error) {
    for (const s of batch) {
      s.error = error;
    }
  } finally {
    lane.inFlight--;
    // Hand the next batch to the first one waiting: it sends with its own I/O.
    const next = lane.waiting.shift();
    if (next) {
      next.leads = true;
    }
  }
}

/** Reservations waiting in this isolate (for metrics and tests). */
export function waitingReservations(): number {
  let n = 0;
  for (const lane of lanes.values()) {
    n += lane.waiting.length;
  }
  return n;
}
