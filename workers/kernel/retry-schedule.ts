import { z } from 'zod';
import { MAX_DELAY_SECONDS } from './backoff';

// How long the pipeline waits before trying again, as settings: production keeps the defaults;
// a chaos or CI run shortens them so an outage longer than every retry fits in minutes.

/** The retry schedule of the queue consumers and the goods' outbox, in seconds. */
export type RetrySchedule = {
  /** Queue consumers: the first retry's delay (RETRY_BACKOFF_BASE_SECONDS); each next one doubles. */
  backoffBaseSeconds: number;
  /** Queue consumers: the longest retry delay (RETRY_BACKOFF_CAP_SECONDS). */
  backoffCapSeconds: number;
  /** Outbox: the longest wait after a failed queue send (OUTBOX_RETRY_CAP_SECONDS). */
  outboxRetryCapSeconds: number;
  /** Outbox: a sent reservation not settled after this long is sent again (OUTBOX_RESEND_SECONDS); then doubling. */
  resendSeconds: number;
  /** Outbox: the longest wait between two sends of an unsettled reservation (OUTBOX_RESEND_CAP_SECONDS). */
  resendCapSeconds: number;
};

/** The production schedule: 8 consumer retries span about 4 minutes, then the outbox re-sends every 2 to 10 minutes. */
export const DEFAULT_RETRY_SCHEDULE: RetrySchedule = {
  backoffBaseSeconds: 1,
  backoffCapSeconds: 300,
  outboxRetryCapSeconds: 60,
  resendSeconds: 120,
  resendCapSeconds: 600,
};

const SECONDS = `must be a whole number of seconds (1-${MAX_DELAY_SECONDS})`;

/** A whole number of seconds from a var (string or number); empty or unset means the default. */
const seconds = z
  .union([z.string(), z.number()], { error: SECONDS })
  .optional()
  .transform((v) => (v === undefined || v === '' ? undefined : Number(v)))
  .pipe(
    z.number({ error: SECONDS }).int({ error: SECONDS }).min(1, { error: SECONDS }).max(MAX_DELAY_SECONDS, { error: SECONDS }).optional(),
  );

/** The schedule's variables, for the configuration's schema. */
export const RetryScheduleEnv = {
  RETRY_BACKOFF_BASE_SECONDS: seconds,
  RETRY_BACKOFF_CAP_SECONDS: seconds,
  OUTBOX_RETRY_CAP_SECONDS: seconds,
  OUTBOX_RESEND_SECONDS: seconds,
  OUTBOX_RESEND_CAP_SECONDS: seconds,
};

type ParsedScheduleEnv = { [K in keyof typeof RetryScheduleEnv]?: number | undefined };

/** The schedule from parsed variables, and what is wrong with it (a cap below its start). */
export function retrySchedule(e: ParsedScheduleEnv, issue: (name: string, message: string) => void): RetrySchedule {
  const d = DEFAULT_RETRY_SCHEDULE;
  const schedule: RetrySchedule = {
    backoffBaseSeconds: e.RETRY_BACKOFF_BASE_SECONDS ?? d.backoffBaseSeconds,
    backoffCapSeconds: e.RETRY_BACKOFF_CAP_SECONDS ?? d.backoffCapSeconds,
    outboxRetryCapSeconds: e.OUTBOX_RETRY_CAP_SECONDS ?? d.outboxRetryCapSeconds,
    resendSeconds: e.OUTBOX_RESEND_SECONDS ?? d.resendSeconds,
    resendCapSeconds: e.OUTBOX_RESEND_CAP_SECONDS ?? d.resendCapSeconds,
  };
  if (schedule.backoffCapSeconds < schedule.backoffBaseSeconds) {
    issue('RETRY_BACKOFF_CAP_SECONDS', `must be at least RETRY_BACKOFF_BASE_SECONDS (${schedule.backoffBaseSeconds})`);
  }
  if (schedule.resendCapSeconds < schedule.resendSeconds) {
    issue('OUTBOX_RESEND_CAP_SECONDS', `must be at least OUTBOX_RESEND_SECONDS (${schedule.resendSeconds})`);
  }
  return schedule;
}
