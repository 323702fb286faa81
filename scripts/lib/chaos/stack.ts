// The chaos run's stack: its own PostgreSQL and redis-server (services.ts; no redis-server
// when the run goes without the mirror), the Worker's deployable bundle under Miniflare with
// the local bridges (the bench's stack code), the queue consumers on the run's retry schedule,
// and the cron fired on its interval (on the minute in the full run, as Cloudflare does). The Worker's JSON log lines are counted by event, so the
// run can tell when the queues went quiet and when the cron last ran.
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { Log, LogLevel } from 'miniflare';
import { unstable_readConfig } from 'wrangler';
import { queueRole } from '../../../workers/queue/roles.ts';
import { benchSecrets, type Minter, shopperMinter } from '../bench/mint.ts';
import { msUntilNext } from '../dev-cron.ts';
import { type HttpClient, httpClient } from '../load/http-client.ts';
import { startWorkerStack, type WorkerStack } from '../miniflare-stack.ts';
import type { ChaosPlan, QueueSchedule, QueueSettings } from './plan.ts';
import { type OwnPostgres, type OwnServer, startOwnPostgres, startOwnRedis } from './services.ts';
import { clock } from './tally.ts';

const configPath = fileURLToPath(new URL('../../../wrangler.toml', import.meta.url));

// wrangler's declarations leave its Config untyped here; these are the fields read.
type ConsumerConfig = { queue: string; max_retries?: number; retry_delay?: number };

/** The queue consumers of wrangler.toml's production environment, by role: the full run's schedule. */
export function productionQueueSchedule(): QueueSchedule {
  const config = unstable_readConfig({ config: configPath, env: 'production' }, { hideWarnings: true });
  const consumers: ConsumerConfig[] = config.queues.consumers ?? [];
  const settings = (role: string): QueueSettings => {
    const c = consumers.find((q) => queueRole(q.queue) === role);
    if (!c) {
      throw new Error(`wrangler.toml [env.production] has no ${role} queue consumer`);
    }
    // Cloudflare's default when max_retries is not set.
    return { maxRetries: c.max_retries ?? 3, retryDelay: c.retry_delay };
  };
  return { orders: settings('orders'), deadLetters: settings('dead-letters'), timeouts: settings('timeouts') };
}

/** How many printed lines a verbose run keeps for linesAround. */
const RECENT_LINES = 20_000;

/** The Worker's log events: counted, the last time of each, a few warning lines kept. */
export class WorkerEvents {
  readonly counts: Record<string, number> = {};
  readonly lastAt: Record<string, number> = {};
  readonly samples: Record<string, string[]> = {};
  private readonly listeners: ((event: string, line: string) => void)[] = [];

  /** Under --verbose, the lines printed, stamped (the last RECENT_LINES), for linesAround. */
  private readonly recent: { at: number; text: string }[] = [];

  constructor(private readonly verbose: boolean) {}

  /** The verbose lines printed within `spanMs` of any of `times` (epoch ms), in order. */
  linesAround(times: readonly number[], spanMs: number): string[] {
    return this.recent.filter((l) => times.some((t) => Math.abs(l.at - t) <= spanMs)).map((l) => l.text);
  }

  private print(kind: 'worker' | 'runtime', line: string): void {
    const at = Date.now();
    const text = `  ${kind}: ${clock(at)} ${line.slice(0, 400)}`;
    process.stderr.write(`${text}\n`);
    this.recent.push({ at, text });
    if (this.recent.length > RECENT_LINES) {
      this.recent.splice(0, this.recent.length - RECENT_LINES);
    }
  }

  /** Calls `fn` for every event line from now on. */
  listen(fn: (event: string, line: string) => void): () => void {
    this.listeners.push(fn);
    return () => this.listeners.splice(this.listeners.indexOf(fn), 1);
  }

  note(event: string, line: string): void {
    this.counts[event] = (this.counts[event] ?? 0) + 1;
    this.lastAt[event] = Date.now();
    if (/"level":"(warn|error)"/.test(line) || event.startsWith('miniflare.')) {
      const samples = this.samples[event] ?? [];
      if (samples.length < 3) {
        samples.push(line.length > 600 ? `${line.slice(0, 600)}...` : line);
        this.samples[event] = samples;
      }
      if (this.verbose) {
        this.print('worker', line);
      }
    } else if (this.verbose && event === 'runtime.output') {
      // The runtime's own lines (an uncaught exception, a dropped connection): what a fault
      // that leaves no log line of the Worker's can be read from.
      this.print('runtime', line);
    }
    for (const fn of this.listeners) {
      fn(event, line);
    }
  }

  /** For Miniflare's handleRuntimeStdio: the runtime's stdout and stderr, line by line. */
  readonly attach = (stdout: Readable, stderr: Readable): void => {
    for (const stream of [stdout, stderr]) {
      createInterface({ input: stream }).on('line', (line) => {
        const event = /"event":"([^"]+)"/.exec(line)?.[1];
        if (event) {
          this.note(event, line);
        } else if (line.trim()) {
          this.note('runtime.output', line);
        }
      });
    }
  };
}

/** Miniflare's own lines (queue batches, uncaught errors), counted as events instead of printed. */
class EventLog extends Log {
  constructor(private readonly events: WorkerEvents) {
    super(LogLevel.INFO);
  }

  override logWithLevel(level: LogLevel, message: string): void {
    // biome-ignore lint/suspicious/noControlCharactersInRegex: strips the ANSI colours of Miniflare's lines
    const text = message.replace(/\x1b\[[0-9;]*m/g, '');
    this.events.note(/^QUEUE /.test(text) ? 'miniflare.queue_batch' : `miniflare.${LogLevel[level].toLowerCase()}`, text);
  }
}

export type ChaosStack = {
  url: string;
  adminToken: string;
  http: HttpClient;
  /** The run's own servers, to stop and start. */
  postgres: OwnPostgres;
  /** Undefined when the run goes without the Redis mirror. */
  redis: OwnServer | undefined;
  /** The run's database on its PostgreSQL (what the Worker writes). */
  databaseUrl: string;
  worker: WorkerStack;
  events: WorkerEvents;
  minter: Minter;
  cronRuns(): number;
  close(): Promise<void>;
};

/** Miniflare's settings of one queue consumer (the fields this run changes or keeps). */
type ConsumerOptions = {
  maxBatchSize?: number;
  maxBatchTimeout?: number;
  maxRetries?: number;
  deadLetterQueue?: string;
  retryDelay?: number;
};

/** Miniflare's queue consumers with the plan's retries, by each queue's role. */
function withSchedule(consumers: unknown, plan: ChaosPlan): Record<string, ConsumerOptions> {
  if (typeof consumers !== 'object' || consumers === null || Array.isArray(consumers)) {
    throw new Error('wrangler.toml declares no queue consumers with settings');
  }
  const byRole = { orders: plan.schedule.orders, 'dead-letters': plan.schedule.deadLetters, timeouts: plan.schedule.timeouts };
  return Object.fromEntries(
    Object.entries(consumers as Record<string, ConsumerOptions>).map(([name, options]) => {
      const role = queueRole(name);
      // The webhook sender keeps its own settings: its retries are messages of its own, not the queue's.
      const s = role && role !== 'webhooks' ? byRole[role] : undefined;
      return [
        name,
        s ? { ...options, maxRetries: s.maxRetries, ...(s.retryDelay === undefined ? {} : { retryDelay: s.retryDelay }) } : options,
      ];
    }),
  );
}

/** Fires the Worker's scheduled handler at every multiple of `everyMs`, one run at a time. */
function startCron(worker: WorkerStack, everyMs: number, onError: (error: unknown) => void) {
  let runs = 0;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const schedule = () => {
    if (!stopped) {
      timer = setTimeout(fire, msUntilNext(Date.now(), everyMs));
    }
  };
  const fire = () => {
    runs++;
    worker.dispatchScheduled().catch(onError).finally(schedule);
  };
  schedule();
  return {
    runs: () => runs,
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

/** Starts everything; close() stops it all and deletes the servers' files. */
export async function startChaosStack(plan: ChaosPlan, { verbose }: { verbose: boolean }): Promise<ChaosStack> {
  const closers: (() => Promise<void>)[] = [];
  const closeAll = async () => {
    for (const close of closers.reverse()) {
      await close().catch(() => {});
    }
  };
  try {
    const postgres = await startOwnPostgres();
    closers.push(() => postgres.remove());
    const redis = plan.mirror ? await startOwnRedis() : undefined;
    if (redis) {
      closers.push(() => redis.remove());
    }
    const secrets = benchSecrets();
    const minter = await shopperMinter(secrets);
    const events = new WorkerEvents(verbose);
    const worker = await startWorkerStack({
      databaseUrl: postgres.url,
      redisUrl: redis?.url,
      bindings: { ...secrets, ...plan.schedule.bindings },
      log: new EventLog(events),
      configure: (options) => ({
        ...options,
        // In production Cloudflare routes /api/* and /admin/* past the assets; locally that is
        // two more workers in the one process (see docs/performance.md).
        assets: undefined,
        queueConsumers: withSchedule(options.queueConsumers, plan),
        handleRuntimeStdio: events.attach,
      }),
    });
    closers.push(() => worker.close());
    const http = httpClient(worker.url, { maxSockets: plan.maxInFlight + 10, timeoutMs: 15_000 });
    closers.push(async () => http.close());
    const cron = startCron(worker, plan.schedule.cronEveryMs, (error) =>
      events.note('chaos.cron_not_delivered', error instanceof Error ? error.message : String(error)),
    );
    closers.push(async () => cron.stop());
    return {
      url: worker.url,
      adminToken: worker.adminToken,
      http,
      postgres,
      redis,
      databaseUrl: worker.services.databaseUrl,
      worker,
      events,
      minter,
      cronRuns: cron.runs,
      close: closeAll,
    };
  } catch (error) {
    await closeAll();
    throw error;
  }
}
