import { sleep } from '../kernel/sleep';
import { within } from '../kernel/within';

/**
 * Group commit at the edge: concurrent calls of one isolate to the same Durable Object go as
 * one batch, in one RPC (Alibaba's hot-row group commit, moved in front of the object).
 *
 * Per lane (one target object), at most `maxInFlight` batches are on their way. A call that
 * finds a free batch slot and nobody in line sends at once, alone: no added latency at low
 * load. Otherwise it waits in line; when a batch comes back, its sender writes each call's
 * answer into its slot and marks the first in line to send the next batch (everyone waiting,
 * up to `maxBatch`) with its own I/O. Under load the batches grow by themselves and the object
 * does a fraction of the calls.
 *
 * Nobody waits on a promise another request settles: workerd cancels such a waiter as hung,
 * and one that also keeps a timer of its own may run on in the settling request's context ("Cannot
 * perform I/O on behalf of a different request": 22 to 34 purchases of a bench run of 17,000 to
 * 27,000; test/node/group-commit-workerd.e2e.test.ts). Each waiter polls its own slot on its own
 * timer instead. A timer's firing costs workerd a few microseconds (waiters woken without their
 * looks, about three a purchase, took 4% less of workerd's CPU a request in that file's setting),
 * but a hundred waiters looking every millisecond would spend a core on it: only the first in
 * line (the next to lead) looks every `pollMs`; the others look less often the longer they wait,
 * up to every `maxPollMs`, which is at most what their answer waits on top of its batch.
 *
 * Lanes may form a group that shares a budget of batches in flight (`groups`): the stock shards
 * of one goods. A call whose lane is free but whose group is not waits in line for the group, at
 * most half as long as the group's batches take to come back, then its lane sends on its own. On
 * one machine, where every shard runs on the thread that also runs the Worker, a goods' calls
 * are then about as few as with one shard (8 lanes of 2 batches each sent batches of one or two
 * reservations, and each call costs the object as much as ten of its rows); where the shards
 * answer from far away, a call waits at most half a round trip more.
 *
 * A client that hangs up cancels its request, timers and continuations included, and a
 * sender's batch carries others' answers: the sender hands its batch to `waitUntil`, which
 * keeps it alive. And a waiter leads whenever nobody is sending (whoever was told to lead or
 * stands ahead may be gone), a batch out longer than `waitLimitMs` stops counting as in
 * flight, calls in line longer than that are dropped, and a call gives up (WaitedTooLong)
 * after `waitLimitMs` in line or in a batch.
 */

/** What a waiter finds in its slot: its answer, or its turn to send the next batch. */
type Wake<Out> = { kind: 'done'; out: Out } | { kind: 'failed'; error: unknown } | { kind: 'lead' };

/** A batch on its way, or a batch slot held for a call told to lead (until it sends). */
type Sending = { at: number; lead: boolean };

type Slot<In, Out> = {
  item: In;
  /** When its call started. */
  since: number;
  /** The batch slot held for it when it was told to lead. */
  held?: Sending;
  /** When a sender took it into a batch. */
  takenAt?: number;
  wake?: Wake<Out>;
};

type Lane<In, Out> = {
  sending: Set<Sending>;
  waiting: Slot<In, Out>[];
  /** The lanes that share this one's budget of batches in flight (itself included), if any. */
  group?: Group<In, Out>;
};

/** Lanes that share a budget of batches in flight, and how long their batches took lately. */
type Group<In, Out> = { lanes: Lane<In, Out>[]; batchMs: number };

/** Schedules work that must finish even if the request that started it is cancelled. */
export type WaitUntil = (promise: Promise<unknown>) => void;

export type GroupCommitOptions<In, Out> = {
  /** Sends one batch to the lane's object; answers in the order of the items. */
  send: (lane: string, items: In[]) => Promise<Out[]>;
  /** Largest batch (bounds one call's work). */
  maxBatch: number;
  /** Batches of one lane on their way at once. */
  maxInFlight: number;
  /**
   * Lanes that share a budget of batches in flight: the group of a lane's key (undefined: none),
   * and how many batches the lanes of one group may have on their way at once together. A call
   * waits for that budget at most half as long as the group's batches take to come back (a
   * moving average), and then its lane sends on its own limit alone.
   */
  groups?: { of: (lane: string) => string | undefined; maxInFlight: number };
  /** A call gives up (throws WaitedTooLong) after this long in line or in a batch. */
  waitLimitMs: number;
  /** How often the first in line looks at its slot (default 1 ms). */
  pollMs?: number;
  /** How often, at the longest, any other waiter looks (default 4 ms). */
  maxPollMs?: number;
};

export class WaitedTooLong extends Error {
  constructor() {
    super('waited too long for a batch');
    this.name = 'WaitedTooLong';
  }
}

/** A call told to lead that has not sent within this long is taken to be gone. */
const LEAD_GRACE_MS = 50;

export class GroupCommit<In, Out> {
  private readonly lanes = new Map<string, Lane<In, Out>>();
  private readonly groups = new Map<string, Group<In, Out>>();
  private readonly pollMs: number;
  private readonly maxPollMs: number;
  /** Looks at a slot so far (tests, the bench's profile). */
  looks = 0;

  constructor(private readonly options: GroupCommitOptions<In, Out>) {
    this.pollMs = options.pollMs ?? 1;
    this.maxPollMs = Math.max(this.pollMs, options.maxPollMs ?? 4);
  }

  /**
   * Runs `item` in the next batch of `lane` and returns its answer. `waitUntil` (the request's
   * execution context) keeps a batch this request sends alive if its client hangs up.
   */
  async run(laneKey: string, item: In, waitUntil?: WaitUntil): Promise<Out> {
    const lane = this.lane(laneKey);
    const slot: Slot<In, Out> = { item, since: Date.now() };
    if (this.free(lane) && lane.waiting.length === 0) {
      await this.send(laneKey, lane, [slot], waitUntil);
    } else {
      lane.waiting.push(slot);
      if ((await this.wait(lane, slot)).kind === 'lead') {
        slot.wake = undefined;
        await this.send(laneKey, lane, [slot, ...this.takeWaiting(lane)], waitUntil);
      }
    }
    const answer = slot.wake;
    if (!answer || answer.kind === 'lead') {
      throw new Error('a batch finished without an answer for one of its items');
    }
    if (answer.kind === 'failed') {
      throw answer.error;
    }
    return answer.out;
  }

  /** Calls waiting in this isolate, over all lanes (metrics, tests). */
  waiting(): number {
    let n = 0;
    for (const lane of this.lanes.values()) {
      n += lane.waiting.length;
    }
    return n;
  }

  private lane(key: string): Lane<In, Out> {
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { sending: new Set(), waiting: [] };
      this.lanes.set(key, lane);
      const group = this.options.groups?.of(key);
      if (group !== undefined) {
        lane.group = this.groups.get(group) ?? { lanes: [], batchMs: 0 };
        lane.group.lanes.push(lane);
        this.groups.set(group, lane.group);
      }
    }
    return lane;
  }

  /**
   * The next batch's other calls, in arrival order. Calls in line longer than the wait limit
   * are dropped: their waiters gave up, or belong to requests that were cancelled.
   */
  private takeWaiting(lane: Lane<In, Out>): Slot<In, Out>[] {
    const stale = Date.now() - this.options.waitLimitMs;
    const live = lane.waiting.filter((s) => s.since >= stale);
    const taken = live.slice(0, this.options.maxBatch - 1);
    lane.waiting = live.slice(taken.length);
    return taken;
  }

  /**
   * Batches on their way or about to be sent. One out longer than the wait limit is given up
   * on, and so is a slot held for a leader that has not sent within LEAD_GRACE_MS.
   */
  private inFlight(lane: Lane<In, Out>): number {
    const now = Date.now();
    for (const batch of lane.sending) {
      if (now - batch.at > (batch.lead ? LEAD_GRACE_MS : this.options.waitLimitMs)) {
        lane.sending.delete(batch);
      }
    }
    return lane.sending.size;
  }

  /**
   * Whether `lane` may send a batch now: under its own limit, and under its group's unless its
   * first call has waited for that as long as the group allows.
   */
  private free(lane: Lane<In, Out>): boolean {
    if (this.inFlight(lane) >= this.options.maxInFlight) {
      return false;
    }
    const groups = this.options.groups;
    if (!lane.group || !groups) {
      return true;
    }
    const first = lane.waiting[0];
    if (first && Date.now() - first.since >= lane.group.batchMs / 2) {
      return true;
    }
    return lane.group.lanes.reduce((n, l) => n + this.inFlight(l), 0) < groups.maxInFlight;
  }

  /** Tells `slot` to send the next batch, holding a batch slot for it until it does. */
  private lead(lane: Lane<In, Out>, slot: Slot<In, Out>): void {
    slot.held = { at: Date.now(), lead: true };
    lane.sending.add(slot.held);
    slot.wake = { kind: 'lead' };
  }

  /**
   * Polls the slot until it holds an answer or a turn to lead: every pollMs while first in line,
   * otherwise at intervals doubling up to maxPollMs.
   */
  private async wait(lane: Lane<In, Out>, slot: Slot<In, Out>): Promise<Wake<Out>> {
    let interval = this.pollMs;
    for (;;) {
      await sleep(interval);
      this.looks++;
      if (!slot.wake) {
        this.look(lane, slot);
      }
      if (slot.wake) {
        return slot.wake;
      }
      interval = lane.waiting[0] === slot ? this.pollMs : Math.min(interval * 2, this.maxPollMs);
    }
  }

  /** A waiter's look at the line: lead when nobody is sending, give up when its time is up. */
  private look(lane: Lane<In, Out>, slot: Slot<In, Out>): void {
    const now = Date.now();
    const at = lane.waiting.indexOf(slot);
    if (at < 0) {
      // Taken into a batch (its sender will answer, unless the batch was lost), or dropped
      // from the line as stale.
      if (now - (slot.takenAt ?? slot.since) > this.options.waitLimitMs) {
        slot.wake = { kind: 'failed', error: new WaitedTooLong() };
      }
    } else if (this.free(lane)) {
      // A free batch slot and nobody sending: whoever was told to lead, or stands ahead in
      // line, went away. Lead instead.
      lane.waiting.splice(at, 1);
      this.lead(lane, slot);
    } else if (now - slot.since > this.options.waitLimitMs) {
      lane.waiting.splice(at, 1);
      slot.wake = { kind: 'failed', error: new WaitedTooLong() };
    }
  }

  private send(laneKey: string, lane: Lane<In, Out>, batch: Slot<In, Out>[], waitUntil: WaitUntil | undefined): Promise<void> {
    const sending = this.deliver(laneKey, lane, batch);
    waitUntil?.(sending);
    return sending;
  }

  private async deliver(laneKey: string, lane: Lane<In, Out>, batch: Slot<In, Out>[]): Promise<void> {
    const entry: Sending = batch[0]?.held ?? { at: 0, lead: false };
    entry.at = Date.now();
    entry.lead = false;
    lane.sending.add(entry);
    for (const s of batch) {
      s.takenAt = entry.at;
    }
    try {
      const outs = await within(
        this.options.send(
          laneKey,
          batch.map((s) => s.item),
        ),
        this.options.waitLimitMs,
        () => new WaitedTooLong(),
      );
      batch.forEach((s, i) => {
        const out = outs[i];
        s.wake =
          out === undefined
            ? { kind: 'failed', error: new Error('the batch answered fewer items than it was sent') }
            : { kind: 'done', out };
      });
    } catch (error) {
      for (const s of batch) {
        s.wake = { kind: 'failed', error };
      }
    } finally {
      lane.sending.delete(entry);
      if (lane.group) {
        const took = Date.now() - entry.at;
        lane.group.batchMs = lane.group.batchMs === 0 ? took : lane.group.batchMs + (took - lane.group.batchMs) / 8;
      }
    }
    // Tell the first one waiting to send the next batch, with its own I/O: in this lane, or in
    // the lane of its group whose first call has waited longest.
    const next = (lane.group?.lanes ?? [lane])
      .filter((l) => l.waiting.length > 0 && this.free(l))
      .sort((a, b) => (a.waiting[0]?.since ?? 0) - (b.waiting[0]?.since ?? 0))[0];
    const first = next?.waiting.shift();
    if (next && first) {
      this.lead(next, first);
    }
  }
}
