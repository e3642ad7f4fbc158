import { inspect } from 'node:util';

const REDACTED = '<redacted>';

/**
 * A value that must never reach a log, a diff or an error message.
 * Every implicit string form is redacted; `reveal()` is the one explicit way out,
 * used only where the value is written to its destination.
 */
export class Secret {
  readonly #value: string;

  constructor(value: string) {
    this.#value = value;
  }

  reveal(): string {
    return this.#value;
  }

  get isEmpty(): boolean {
    return this.#value.length === 0;
  }

  equals(other: Secret): boolean {
    return this.#value === other.#value;
  }

  toString(): string {
    return REDACTED;
  }

  toJSON(): string {
    return REDACTED;
  }

  [inspect.custom](): string {
    return `Secret(${REDACTED})`;
  }
}

/** How a renderer turns a secret into text: the real value for files, a mask for display. */
export type SecretWriter = (secret: Secret) => string;

export const revealSecret: SecretWriter = (secret) => secret.reveal();
export const maskSecret: SecretWriter = () => REDACTED;
