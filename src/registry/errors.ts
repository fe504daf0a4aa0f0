/**
 * Errors of the schema registry, in Confluent Schema Registry's terms: every error a registry
 * client sees carries Confluent's numeric `error_code` and its HTTP status, so that existing
 * clients (kafkajs' `@kafkajs/confluent-schema-registry`, Confluent's serializers) react to them
 * as they do against Confluent's own server. The HTTP routes (`transport/http/registry/`) send
 * `{"error_code": …, "message": …}`; the broker maps produce-time failures to its own error table.
 *
 * | name                     | error_code | HTTP | when                                                   |
 * |--------------------------|-----------:|-----:|--------------------------------------------------------|
 * | subjectNotFound          | 40401      | 404  | no such subject (or only soft-deleted, without `deleted=true`) |
 * | versionNotFound          | 40402      | 404  | no such version of the subject                         |
 * | schemaNotFound           | 40403      | 404  | no such schema id, or the schema is not under the subject |
 * | subjectSoftDeleted       | 40404      | 404  | soft-deleting a subject that is already soft-deleted   |
 * | subjectNotSoftDeleted    | 40405      | 404  | a permanent delete of a subject not soft-deleted first |
 * | versionSoftDeleted       | 40406      | 404  | soft-deleting a version already soft-deleted           |
 * | versionNotSoftDeleted    | 40407      | 404  | a permanent delete of a version not soft-deleted first |
 * | subjectConfigNotFound    | 40408      | 404  | the subject has no compatibility level of its own      |
 * | incompatibleSchema       | 409        | 409  | the schema breaks the subject's compatibility level    |
 * | invalidSchema            | 42201      | 422  | not a valid schema of its type, too large, too deep    |
 * | invalidVersion           | 42202      | 422  | a version that is not a positive integer, `latest` or −1 |
 * | invalidCompatibility     | 42203      | 422  | an unknown compatibility level                         |
 * | invalidSubject           | 42208      | 422  | an empty or too long subject name, or control characters |
 * | invalidRequest           | 400        | 400  | a body that is not the JSON object the route takes     |
 * | unauthorized             | 40101      | 401  | no valid API key while the broker has keys             |
 * | forbidden                | 40301      | 403  | the key's role may not do this; a cross-site write     |
 * | unsupportedMediaType     | 415        | 415  | a Content-Type the registry does not take              |
 * | storeFailed              | 50001      | 503  | `schemas.json` could not be written; not in effect     |
 * | unavailable              | 50002      | 503  | `schemas.json` is unreadable, or the broker is closing |
 */

/** One row of the registry's error table. */
export interface RegistryErrorKind {
  /** Confluent's numeric error code, sent as `error_code`. */
  readonly errorCode: number;
  /** HTTP status. */
  readonly http: number;
}

function kind(errorCode: number, http: number): RegistryErrorKind {
  return Object.freeze({ errorCode, http });
}

/** Every registry error kind, by name (the module table). */
export const RegistryErrors = Object.freeze({
  subjectNotFound: kind(40401, 404),
  versionNotFound: kind(40402, 404),
  schemaNotFound: kind(40403, 404),
  subjectSoftDeleted: kind(40404, 404),
  subjectNotSoftDeleted: kind(40405, 404),
  versionSoftDeleted: kind(40406, 404),
  versionNotSoftDeleted: kind(40407, 404),
  subjectConfigNotFound: kind(40408, 404),
  incompatibleSchema: kind(409, 409),
  invalidSchema: kind(42201, 422),
  invalidVersion: kind(42202, 422),
  invalidCompatibility: kind(42203, 422),
  invalidSubject: kind(42208, 422),
  invalidRequest: kind(400, 400),
  unauthorized: kind(40101, 401),
  forbidden: kind(40301, 403),
  unsupportedMediaType: kind(415, 415),
  storeFailed: kind(50001, 503),
  unavailable: kind(50002, 503),
});

/**
 * An error a registry client should see. The message names the failed action first, values
 * quoted, the detail after a colon (`Cannot register a schema under subject "orders-value": …`).
 */
export class RegistryError extends Error {
  override name = "RegistryError";
  /**
   * @param kind the row of {@link RegistryErrors}.
   * @param message what failed and why.
   * @param details optional extras (the reasons of an incompatibility), shown by the routes.
   */
  constructor(
    readonly kind: RegistryErrorKind,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }
}
