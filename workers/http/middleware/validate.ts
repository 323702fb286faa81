import { zValidator } from '@hono/zod-validator';
import type { Context, MiddlewareHandler, ValidationTargets } from 'hono';
import type { z } from 'zod';
import { AppError } from '../../kernel/errors';
import type { AppEnv } from '../context';

function invalid(target: string, issues: readonly z.core.$ZodIssue[]): AppError {
  const issue = issues[0];
  const where = issue?.path.length ? `${issue.path.join('.')}: ` : '';
  return new AppError('INVALID_INPUT', `${target} ${where}${issue?.message ?? 'is invalid'}`);
}

/** zod validation for a route; a failure is the contract's 400 INVALID_INPUT naming the field. */
export function valid<T extends z.ZodType, Target extends keyof ValidationTargets>(target: Target, schema: T) {
  return zValidator(target, schema, (result) => {
    if (!result.success) {
      throw invalid(target, result.error.issues);
    }
  });
}

/**
 * Like valid, for a pipeline of named steps: the parsed value goes to `keep`, which puts what
 * later steps need into the context.
 */
export function validInto<T extends z.ZodType, Target extends keyof ValidationTargets>(
  target: Target,
  schema: T,
  keep: (c: Context<AppEnv>, value: z.output<T>) => void,
): MiddlewareHandler<AppEnv> {
  return zValidator(target, schema, (result, c: Context<AppEnv>) => {
    if (!result.success) {
      throw invalid(target, result.error.issues);
    }
    keep(c, result.data);
  });
}
