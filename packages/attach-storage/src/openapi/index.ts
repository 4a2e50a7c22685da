/**
 * `attach-storage/openapi`: the OpenAPI 3.1 document of the handlers (built from the route tables'
 * valibot schemas), and the pieces a host merges its own paths with: the answers' schemas, the list
 * convention's query and headers, and `jsonSchemaOf` for its own valibot schemas.
 */
export {
  BinaryPart,
  jsonSchemaOf,
  LIST_HEADERS_DOC,
  ListConventionQuery,
  openApiDocument,
  withOpenApi,
  type JsonObject,
  type OpenApiOptions,
  type ResponseDoc,
  type RouteDoc,
} from '../http/openapi.js'
export { AttachBagAnswer, AttachmentViewAnswer, ErrorAnswer } from '../http/answers.js'
