import { zValidator } from '@hono/zod-validator';
import type { ValidationTargets } from 'hono';
import type { z } from 'zod';
import { AppError } from '../../kernel/errors';

/** zod validation for a route; a failure is the contract's 400 INVALID_INPUT naming the field. */
export function valid<T extends z.ZodType, Target extends keyof ValidationTargets>(target: Target, schema: T) {
  return zValidator(target, schema, (result) => {
    if (!result.success) {
      const issue = result.error.issues[0];
      const where = issue?.path.length ? `${issue.path.join('.')}: ` : '';
      throw new AppError('INVALID_INPUT', `${target} ${where}${issue?.message ?? 'is invalid'}`);
    }
  });
}
