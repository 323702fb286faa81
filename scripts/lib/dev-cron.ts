// The cron trigger of production, for `npm run dev`: wrangler dev never fires cron triggers by
// itself (only GET /__scheduled does, with --test-scheduled), so locally pre-warm,
// reconciliation and the overdue sweep would run only when someone asked. This fires the
// schedule once a minute, on the minute, as Cloudflare does, and logs each firing.

/** The schedule of every environment in wrangler.toml ([triggers] crons); a test keeps them in step. */
export const DEV_SCHEDULE = '* * * * *';
const MINUTE_MS = 60_000;

export type DevCronSettings = { on: false } | { on: true; intervalMs: number };

/**
 * DEV_CRON=off (or 0, false, no) turns the firing off; DEV_CRON_INTERVAL_MS fires more often
 * than once a minute (tests). Throws on a value it cannot read.
 */
export function devCronSettings(env: Record<string, string | undefined>): DevCronSettings {
  if (['off', '0', 'false', 'no'].includes((env.DEV_CRON ?? '').trim().toLowerCase())) {
    return { on: false };
  }
  const raw = env.DEV_CRON_INTERVAL_MS;
  if (raw === undefined || raw === '') {
    return { on: true, intervalMs: MINUTE_MS };
  }
  const intervalMs = Number(raw);
  if (!Number.isInteger(intervalMs) || intervalMs < 100 || intervalMs > 3_600_000) {
    throw new Error(`DEV_CRON_INTERVAL_MS must be an integer between 100 and 3600000 (milliseconds), got "${raw}"`);
  }
  return { on: true, intervalMs };
}

/** How long from `now` to the next multiple of `intervalMs` (the next minute, by default). */
export function msUntilNext(now: number, intervalMs: number): number {
  return intervalMs - (now % intervalMs);
}

/** Why a fetch failed: undici's "fetch failed" names the cause (ECONNREFUSED, ...) only inside. */
function reason(error: unknown): string {
  if (!(error instanceof Error)) {
    return String(error);
  }
  const cause = error.cause instanceof Error ? ('code' in error.cause ? String(error.cause.code) : error.cause.message) : undefined;
  return cause ? `${error.message}: ${cause}` : error.message;
}

/** The one line printed at start about the cron. */
export function devCronNotice(settings: DevCronSettings, url: string): string {
  const byHand = `${url}/__scheduled?${new URLSearchParams({ cron: DEV_SCHEDULE })}`;
  if (!settings.on) {
    return `cron: off (DEV_CRON=off); fire it by hand with GET ${byHand}`;
  }
  const every = settings.intervalMs === MINUTE_MS ? 'every minute, on the minute,' : `every ${settings.intervalMs} ms`;
  return `cron: fires "${DEV_SCHEDULE}" ${every} as production does (GET /__scheduled); DEV_CRON=off turns it off`;
}

/**
 * Fires GET `url`/__scheduled?cron=... at every multiple of `intervalMs` (so once a minute on
 * the minute by default) until stopped, one firing at a time; `say` gets one line per firing.
 */
export function startDevCron({ url, intervalMs = MINUTE_MS, say }: { url: string; intervalMs?: number; say: (line: string) => void }): {
  stop(): void;
} {
  const target = `${url}/__scheduled?${new URLSearchParams({ cron: DEV_SCHEDULE })}`;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;

  const schedule = () => {
    if (!stopped) {
      timer = setTimeout(fire, msUntilNext(Date.now(), intervalMs));
      // The dev server keeps the process alive; the schedule alone must not.
      timer.unref();
    }
  };

  async function fire(): Promise<void> {
    const started = Date.now();
    const at = new Date(started).toISOString().slice(11, 19);
    try {
      // The Worker answers at once and runs the jobs in waitUntil; their own log line
      // (cron.run, or cron.failed) follows in wrangler's output.
      const answer = await fetch(target, { signal: AbortSignal.timeout(Math.max(intervalMs, 10_000)) });
      const text = (await answer.text()).trim().replace(/\s+/g, ' ').slice(0, 80);
      say(`cron ${at}: ${answer.status} ${text || '(empty)'} (${Date.now() - started} ms)`);
    } catch (error) {
      say(`cron ${at}: not delivered (${reason(error)})`);
    } finally {
      schedule();
    }
  }

  schedule();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
