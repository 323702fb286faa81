// The Worker as the bench runs it: the deployable bundle under Miniflare's API (one workerd
// process; `wrangler dev` adds a second one in front), with three local-only adjustments:
//
// - Requests go to the Worker's own socket, not through Miniflare's entry worker, the local
//   stand-in for Cloudflare's front line (it sets CF-Connecting-IP, which the bench then sends
//   itself, as Cloudflare's edge does). On this machine the entry worker cost workerd about
//   270-300 µs of CPU per GET and 550 µs per POST with a purchase's body, more than the Worker
//   itself spends answering such a request at once (150-180 µs). `--entry-worker` keeps it.
// - No static-assets layer by default. In production Cloudflare routes /api/* and /admin/* past
//   the assets before the Worker runs; Miniflare does that routing in two extra workers inside
//   the same workerd process, which on this machine costs more than half of a trivial route's
//   throughput (about 2,000 instead of 4,900 req/s). `--assets` keeps it.
// - The payment-timeout queue has no consumer. Miniflare's local queue holds every delayed
//   message on a workerd timer, and workerd allows 10,000 active timers: a bench that sells
//   tens of thousands of units with a 15-minute payment window would overflow it. The Worker
//   still sends every timeout message; they are accepted and dropped, and would only have
//   fired long after the bench.
// - The objects' storage is on tmpfs (/dev/shm) when the machine has one. workerd keeps each
//   object's SQLite in a file and syncs it to disk as its transactions commit, on the thread
//   that runs the Worker and every object: in a purchase phase on this machine about 110 fsyncs
//   a second, 0.5 ms each at the median and up to 7.5 ms, about 6% of that thread, during
//   which no request moves. Cloudflare's object storage makes a write durable off the
//   request's thread (the output gate holds only that object's replies), and the classic
//   stack's Redis does not sync each write either. `--objects-on-disk` keeps the disk.
//
// Miniflare's own log lines say how long each queue batch took ("QUEUE seckill-orders 100/100
// (27ms)"); they are collected here, and the Worker's JSON log lines are counted by event
// instead of printed, so a run's output stays readable.
import diagnostics from 'node:diagnostics_channel';
import { existsSync, rmSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { Log, LogLevel } from 'miniflare';
import { type Bundle, startWorkerStack, type WorkerStack } from '../miniflare-stack.ts';
import type { QueueBatch } from './consumer.ts';

/** What `workerLogChannel` publishes: one JSON log line of the Worker and its event. */
export type WorkerLogLine = { event: string; line: string };

export type BenchStackOptions = {
  databaseUrl?: string | undefined;
  redisUrl?: string | undefined;
  assets: boolean;
  /** Through Miniflare's entry worker instead of the Worker's own socket. */
  entryWorker?: boolean;
  /** Postgres and the bridges in this process instead of a child process of their own. */
  servicesInProcess?: boolean;
  bindings: Record<string, string>;
  verbose?: boolean;
  inspectorPort?: number | undefined;
  bundle?: Bundle;
  /** Keep the objects' SQLite files in Miniflare's directory on disk instead of on tmpfs. */
  objectsOnDisk?: boolean;
};

export type BenchStack = {
  stack: WorkerStack;
  /** Where the objects' SQLite files are: `tmpfs` (a directory under /dev/shm, removed at close) or `disk`. */
  objectStorage: 'tmpfs' | 'disk';
  orderBatches(): QueueBatch[];
  events(): Record<string, number>;
  eventSamples(): Record<string, string[]>;
};

// biome-ignore lint/suspicious/noControlCharactersInRegex: strips the ANSI colours of Miniflare's lines
const ANSI = /\x1b\[[0-9;]*m/g;
const QUEUE_LINE = /QUEUE (\S+) (\d+)\/(\d+) \((\d+)ms\)/;

class BenchLog extends Log {
  readonly batches: QueueBatch[] = [];
  readonly events: Record<string, number> = {};
  readonly samples: Record<string, string[]> = {};
  /** Print every line (--verbose) instead of counting the Worker's events. */
  readonly printAll: boolean;

  constructor(printAll: boolean) {
    super(printAll ? LogLevel.INFO : LogLevel.WARN);
    this.printAll = printAll;
  }

  override logWithLevel(level: LogLevel, message: string): void {
    const text = message.replace(ANSI, '');
    const queue = QUEUE_LINE.exec(text);
    if (queue) {
      this.batches.push({ at: Date.now(), queue: queue[1] ?? '', acked: Number(queue[2]), size: Number(queue[3]), ms: Number(queue[4]) });
      return;
    }
    const event = /"event":"([^"]+)"/.exec(text)?.[1] ?? (/QuotaExceededError/.test(text) ? 'miniflare.queue_timer_quota' : undefined);
    if (event && !this.printAll) {
      this.events[event] = (this.events[event] ?? 0) + 1;
      return;
    }
    super.logWithLevel(level, message);
  }
}

/** The Worker's JSON log lines, for whoever measures from them (consumer.ts: per-batch timings). */
export const workerLogChannel = diagnostics.channel('edge-seckill:worker-log');

/** The Worker's console output (JSON lines, see workers/log.ts), counted by event. */
function countLines(log: BenchLog, ...streams: Readable[]): void {
  for (const stream of streams) {
    createInterface({ input: stream }).on('line', (line) => {
      const event = /"event":"([^"]+)"/.exec(line)?.[1];
      if (event) {
        log.events[event] = (log.events[event] ?? 0) + 1;
        // The first few lines of each warning or error, so a run that saw them says why.
        const samples = log.samples[event] ?? [];
        if (/"level":"(warn|error)"/.test(line) && samples.length < 3) {
          samples.push(line.length > 2_000 ? `${line.slice(0, 2_000)}...` : line);
          log.samples[event] = samples;
        }
        if (workerLogChannel.hasSubscribers) {
          workerLogChannel.publish({ event, line } satisfies WorkerLogLine);
        }
      } else if (line.trim()) {
        process.stderr.write(`${line}\n`);
      }
    });
  }
}

/** Where the objects' storage goes unless the bench is asked to keep it on disk. */
const TMPFS = '/dev/shm';

/** The Worker under Miniflare as the bench runs it, with its log lines counted. */
export async function startBenchStack(o: BenchStackOptions): Promise<BenchStack> {
  const log = new BenchLog(o.verbose ?? false);
  const objectsDir = !o.objectsOnDisk && existsSync(TMPFS) ? await mkdtemp(join(TMPFS, 'edge-seckill-bench-objects-')) : undefined;
  // tmpfs is memory: removed when the stack closes, and when a run ends without closing it (an
  // error, Ctrl-C).
  const removeObjects = () => {
    if (objectsDir) {
      rmSync(objectsDir, { recursive: true, force: true });
    }
  };
  const onSignal = (signal: NodeJS.Signals) => {
    removeObjects();
    process.exit(signal === 'SIGINT' ? 130 : 143);
  };
  process.once('exit', removeObjects);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const started = startWorkerStack({
    databaseUrl: o.databaseUrl,
    redisUrl: o.redisUrl,
    servicesProcess: !o.servicesInProcess,
    bindings: o.bindings,
    direct: !o.entryWorker,
    ...(o.bundle ? { bundle: o.bundle } : {}),
    log,
    configure: (options) => {
      const consumers = Object.fromEntries(Object.entries(options.queueConsumers ?? {}).filter(([name]) => !name.includes('timeout')));
      return {
        ...options,
        ...(o.assets ? {} : { assets: undefined }),
        queueConsumers: consumers,
        ...(o.inspectorPort ? { inspectorPort: o.inspectorPort } : {}),
        ...(objectsDir ? { durableObjectsPersist: objectsDir } : {}),
        ...(o.verbose ? {} : { handleRuntimeStdio: (stdout: Readable, stderr: Readable) => countLines(log, stdout, stderr) }),
      };
    },
  });
  const stack = await started.catch(async (error: unknown) => {
    removeObjects();
    throw error;
  });
  return {
    stack: {
      ...stack,
      close: async () => {
        await stack.close();
        removeObjects();
        process.off('exit', removeObjects);
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      },
    },
    objectStorage: objectsDir ? 'tmpfs' : 'disk',
    /** Order-queue batches Miniflare dispatched so far: `{ at, size, acked, ms }`. */
    orderBatches: () => log.batches.filter((b) => b.queue.includes('orders')),
    /** Worker log events (and Miniflare quota errors) counted by name. */
    events: () => ({ ...log.events }),
    /** The first lines of each warning or error event. */
    eventSamples: () => structuredClone(log.samples),
  };
}
