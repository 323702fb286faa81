// The bench table's later sections: the capacity model and its inputs, the delayed, sharded,
// waiting-room and classic-stack phases.

import { RESULT_WAIT_SECONDS } from '../../../web/src/shopper/pacing.ts';
import type { ObjectCallCounts } from '../../../workers/kernel/object-calls.ts';
import { fmt, table } from '../load/metrics.ts';
import type { ClassicRun } from './classic/index.ts';
import type { AllowlistJoins, EligibilityViews, GoodsPagePhase, JourneyRoutes } from './crowd-phases.ts';
import type { HeldReadsPhase } from './held-reads.ts';
import { MODEL_SHARDS, objectsPerGoods, TARGET_PURCHASES_PER_SEC } from './model.ts';
import { purchasesPerStockCall } from './objects.ts';
import type { DelayPhase, ModelPhase, ShardPhase } from './phases.ts';
import type { QueuePhase } from './room.ts';

type Extras = {
  purchase: { acceptedPerSec: number; objectCalls?: ObjectCallCounts };
  model: ModelPhase;
  objectDelay: DelayPhase | null;
  shards: ShardPhase | null;
  /** Absent in results of runs before the phase. */
  goodsPage?: GoodsPagePhase;
  allowlistJoins?: AllowlistJoins[];
  /** Absent in results of runs before the phase. */
  eligibilityViews?: EligibilityViews;
  journeyRoutes?: JourneyRoutes;
  queue: QueuePhase | null;
  /** Absent in results of runs before the phase. */
  heldReads?: HeldReadsPhase | null;
  classic: ClassicRun | { skipped: string };
};

/** Lines for the model, the delay, the shards, the queue and the classic stack. */
export function formatExtras(r: Extras): string[] {
  const { model, cpu, journey } = r.model;
  const journeyOf = new Map(journey.perPurchase.map((i) => [i.cls, i]));
  const withPolls = new Map(journey.scenarios.map((s) => [s.shards, s.production]));
  const lines = [
    '',
    `Capacity model: object calls per accepted purchase (purchase phase, ${fmt(model.purchases)} purchases), CPU per call ` +
      `(profiled phase, ${fmt(cpu.purchases)} purchases), ${fmt(model.limitPerObject)} requests/s per object`,
    table([
      [
        'object class',
        'calls/purchase',
        'requests/purchase',
        'journey calls',
        'journey requests',
        'CPU ms/call',
        'CPU ms',
        'objects (1/16 shards)',
      ],
      ...model.inputs.map((i) => [
        i.cls,
        fmt(i.callsPerPurchase, 3),
        fmt(i.requestsPerPurchase, 3),
        fmt(journeyOf.get(i.cls)?.callsPerPurchase, 3),
        fmt(journeyOf.get(i.cls)?.requestsPerPurchase, 3),
        fmt(i.cpuMsPerCall, 3),
        fmt(cpu.cpuMs[i.cls], 1),
        `${objectsPerGoods(i.cls, 1)}/${objectsPerGoods(i.cls, 16)}`,
      ]),
    ]),
    '',
    table([
      [
        'shards',
        'purchases/s (calls as measured)',
        'limited by',
        'purchases/s (one call per request)',
        'limited by',
        `hottest object at ${fmt(TARGET_PURCHASES_PER_SEC)}/s`,
        'with result polls (journey)',
        'limited by',
      ],
      ...model.scenarios.map((s) => {
        const hot = Object.entries(s.perObjectAtTarget).sort((a, b) => b[1] - a[1])[0];
        return [
          String(s.shards),
          fmt(s.measured.purchasesPerSec),
          s.measured.limitedBy ?? '-',
          fmt(s.production.purchasesPerSec),
          s.production.limitedBy ?? '-',
          hot ? `${hot[0]} ${fmt(hot[1])} calls/s` : '-',
          fmt(withPolls.get(s.shards)?.purchasesPerSec),
          withPolls.get(s.shards)?.limitedBy ?? '-',
        ];
      }),
    ]),
    `(shards modelled: ${MODEL_SHARDS.join(', ')}; a journey is challenge + token + purchase + the result until final, each poll held up to ${RESULT_WAIT_SECONDS} s for it, ` +
      `as the shopper page polls: ${fmt(journey.accepted)} of ${fmt(journey.shoppers)} accepted, ${fmt(journey.final)} final after ` +
      `${fmt(journey.pollsPerPurchase, 2)} polls each (p50 ${fmt(journey.finalMs.p50Ms)} ms), ${fmt(journey.cpuUsPerJourney)} µs of the Worker's CPU each, ` +
      `${fmt(journey.grossCpuUsPerJourney)} with the stack's ${fmt(journey.restingCpuMsPerSecond, 1)} ms a second at rest left in)`,
  ];
  const rows: string[][] = [['phase', 'requests', 'req/s', 'p50 ms', 'p90 ms', 'p99 ms', 'notes']];
  const d = r.objectDelay;
  if (d) {
    rows.push([
      `purchase, ${d.delayMs} ms before each object call`,
      fmt(d.requests),
      fmt(d.rps),
      fmt(d.p50Ms),
      fmt(d.p90Ms),
      fmt(d.p99Ms),
      `${d.sequentialCallsP50} sequential calls at p50, ${d.sequentialCallsP99} at p99`,
    ]);
  }
  const s = r.shards;
  if (s) {
    rows.push([
      `purchase, ${s.shardsAsked} shards`,
      fmt(s.requests),
      fmt(s.rps),
      fmt(s.p50Ms),
      fmt(s.p90Ms),
      fmt(s.p99Ms),
      `${fmt(s.acceptedPerSec)} purchases/s, ${s.ratioToOneShard}x of 1 shard (${fmt(r.purchase.acceptedPerSec)} before, ` +
        `${fmt(s.oneShardAfter.acceptedPerSec)} right after); ${s.shardsReported} in the stats; ` +
        `${s.soldAll ? `all ${fmt(s.stock)} units sold` : `${fmt(s.remaining)} of ${fmt(s.stock)} units left`}; ` +
        `${fmt(s.purchasesPerCall, 1)} purchases a stock call (1 shard: ${fmt(r.purchase.objectCalls && purchasesPerStockCall(r.purchase.objectCalls), 1)})`,
    ]);
  }
  const g = r.goodsPage;
  if (g) {
    rows.push([
      `goods page, ${g.shards} shards`,
      fmt(g.requests),
      fmt(g.rps),
      fmt(g.p50Ms),
      fmt(g.p90Ms),
      fmt(g.p99Ms),
      `${fmt(g.stockCallsPerView, 4)} stock object calls a page view (the figure kept a second; each read asks every shard)`,
    ]);
  }
  for (const j of r.allowlistJoins ?? []) {
    rows.push([
      `allowlist join, ${j.limitScope}-scoped`,
      fmt(j.requests),
      fmt(j.rps),
      fmt(j.p50Ms),
      fmt(j.p90Ms),
      fmt(j.p99Ms),
      `${fmt(j.sqlPerJoin, 4)} Postgres requests a join, ${fmt(j.invited)} invited (` +
        `${j.limitScope === 'goods' ? "the list from the isolate's copy" : "the list and the activity's holders from the isolate's copies"})`,
    ]);
  }
  const e = r.eligibilityViews;
  if (e) {
    rows.push([
      'page eligibility, a sale under way',
      fmt(e.requests),
      fmt(e.rps),
      fmt(e.p50Ms),
      fmt(e.p90Ms),
      fmt(e.p99Ms),
      `${fmt(e.sqlPerView, 4)} Postgres requests a page load, ${fmt(e.shoppers)} shoppers (the units each holds from the isolate's copy)`,
    ]);
  }
  for (const route of r.journeyRoutes?.routes ?? []) {
    rows.push([
      `journey by route: ${route.route}`,
      fmt(route.requests),
      fmt(route.rps),
      fmt(route.p50Ms),
      fmt(route.p90Ms),
      fmt(route.p99Ms),
      `${fmt(route.cpuUsPerRequest)} µs of workerd's CPU a request; ${Object.entries(route.outcomes)
        .map(([k, v]) => `${k}: ${fmt(v)}`)
        .join(', ')}`,
    ]);
  }
  const c = 'skipped' in r.classic ? undefined : r.classic;
  if (c) {
    rows.push([
      'classic stack (Node + Redis Lua + pg)',
      fmt(c.requests),
      fmt(c.rps),
      fmt(c.p50Ms),
      fmt(c.p90Ms),
      fmt(c.p99Ms),
      `${fmt(c.accepted)} accepted, ${fmt(c.ordersPerSec)} orders/s written, drained ${fmt(c.drainMs)} ms after; ${c.invariants.detail}`,
    ]);
  }
  lines.push('', table(rows));
  const j = r.journeyRoutes;
  if (j) {
    lines.push(
      `A journey by route, each under the crowd: ${fmt(j.cpuUsPerJourney)} µs of workerd's CPU a shopper ` +
        `(${j.routes.map((x) => `${x.route} ${fmt(x.cpuUsPerRequest)}`).join(' + ')}), where the journeys walked one by one take ` +
        `${fmt(r.model?.journey.cpuUsPerJourney)} µs each at rest`,
    );
  }
  if (!c && 'skipped' in r.classic) {
    lines.push(`Classic stack: skipped (${r.classic.skipped})`);
  }
  const q = r.queue;
  if (q) {
    lines.push(
      '',
      `Waiting room: ${fmt(q.shoppers)} shoppers, ${fmt(q.admitPerSecond)} admitted/s${q.roomShards ? ` over ${fmt(q.roomShards)} shards` : ''}${q.stockShards ? `, ${fmt(q.stockShards)} stock shards` : ''}: ` +
        `joined ${fmt(q.joinedPerSec)}/s (${q.joinedWith === 'post' ? 'POST .../queue, then the live channel' : 'as the live channel opened'}), ` +
        `${fmt(q.liveMessages)} live messages (${fmt(q.liveMessagesPerSec)}/s), ${fmt(q.admitted)} admitted, ${fmt(q.accepted)} bought, ` +
        `${fmt(q.soldOut)} told sold out, ${fmt(q.timedOut)} unfinished in ${fmt(q.durationS, 1)} s`,
      `  ETA error (actual admission - promised): |p50| ${fmt(q.etaError.p50AbsS, 1)} s, |p90| ${fmt(q.etaError.p90AbsS, 1)} s, ` +
        `mean ${fmt(q.etaError.meanS, 2)} s, the last tenth of the line ${fmt(q.etaError.lastTenthMeanAbsS, 2)} s` +
        // Results saved before the ETA counted from the answer have no such field.
        (q.joinAnsweredMs
          ? ` (from each join's answer: p50 ${fmt(q.joinAnsweredMs.p50)} ms, p90 ${fmt(q.joinAnsweredMs.p90)} ms after the request)`
          : ''),
      // Results saved before the room measured its delays have no such field.
      ...(q.measured
        ? [
            `  the room's measured delays, which its ETAs take: a join to its round with nobody ahead ${q.measured.frontLagMs === null ? 'not measured' : `${fmt(q.measured.frontLagMs)} ms`}, ` +
              `its shards' lateness after a round's time ${q.measured.lateMs === null ? 'not measured' : `${fmt(q.measured.lateMs)} ms`}`,
          ]
        : []),
      // Results saved before this measure have no such field.
      ...(q.etaError.byTenthS?.length
        ? [
            `  by tenth of the line in join order (s, + later than promised): ${q.etaError.byTenthS.map((e) => (e > 0 ? `+${fmt(e, 1)}` : fmt(e, 1))).join(' ')}`,
          ]
        : []),
      // Results saved before the rate was measured have no such field.
      q.admittedWhileQueued?.perSecond != null
        ? `  admitted ${fmt(q.admittedWhileQueued.perSecond)}/s (${fmt(q.admittedWhileQueued.perSecond / q.admitPerSecond, 2)}x the rate) ` +
            `over the ${fmt(q.admittedWhileQueued.seconds)} s the line held two seconds' worth`
        : '  admission rate: the line never held two seconds of it (the joins set the pace)',
    );
    const refused = Object.entries(q.refused ?? {}).filter(([why]) => why !== 'sold out in line');
    if (refused.length > 0) {
      lines.push(`  refused: ${refused.map(([why, n]) => `${fmt(n)} ${why}`).join(', ')}`);
    }
    if (q.coordinator?.length) {
      lines.push(
        `  the coordinator's decision over full reports of ${fmt(q.coordinator[0]?.waiting)} waiting (its rules in this process): ` +
          q.coordinator.map((d) => `${fmt(d.ms, 1)} ms over ${fmt(d.shards)} shards (${fmt(d.reportKB, 1)} KB a report)`).join(', '),
      );
    }
  }
  const h = r.heldReads;
  if (h) {
    const kb = (bytes: number | null) => (bytes === null ? 'not measured' : `${fmt(bytes / 1024, 1)} KB`);
    lines.push(
      '',
      `Held result reads: ${fmt(h.held)} of ${fmt(h.reads)} held at once in one stock shard (the consumer paused): ` +
        `${kb(h.heapBytesPerRead)} of the isolate's heap each (the Worker's request and the object's holder; workerd's resident memory ${kb(h.rssBytesPerRead)} each), ` +
        (h.sampledBytesPerRead
          ? `the heap sampler's live bytes ${kb(h.sampledBytesPerRead.object)} under the object's code, ${kb(h.sampledBytesPerRead.worker)} under the Worker's, ${kb(h.sampledBytesPerRead.runtime)} the runtime's, `
          : '') +
        `heap ${fmt(h.heapMb.before, 1)} MB before, ${fmt(h.heapMb.holding, 1)} MB holding, ${fmt(h.heapMb.after, 1)} MB after`,
      `  ${h.readsPer128Mb === null ? "the object's part not measured" : `128 MB holds about ${fmt(h.readsPer128Mb)} at the object's part and the runtime's`} (an object holds at most ${fmt(h.maxHeldReads)}); ` +
        `final answers p50 ${fmt(h.answeredAfterResume.p50Ms)} ms, p99 ${fmt(h.answeredAfterResume.p99Ms)} ms, max ${fmt(h.answeredAfterResume.maxMs)} ms after the consumer resumed; ` +
        Object.entries(h.outcomes)
          .map(([status, n]) => `${fmt(n)} ${status}`)
          .join(', '),
    );
  }
  return lines;
}
