/**
 * `attach-storage/list`: the host application's list and pagination convention as a helper for any
 * Kysely select query (`GET /board?_usePaging=true&currentPage=2&sortBy=title:asc&q=...`). It reads
 * `URLSearchParams` and answers Web `Headers` and `Response`, so it works in any framework.
 * docs/lists.md has the rules.
 *
 * @example
 * import { listResponse, parseListRequest, runList, type ListProvider } from 'attach-storage/list'
 *
 * const boardList: ListProvider = {
 *   fields: { title: { type: 'string', ops: ['eq', 'like'] } },
 *   sortable: { id: 'id', title: 'title' },
 *   primaryKey: 'id',
 * }
 * const list = parseListRequest(new URL(request.url).searchParams, boardList) // 400 on bad input
 * return listResponse(await runList(db.selectFrom('board').selectAll(), boardList, list))
 * @module
 */
export {
  exportAll,
  LIST_HEADERS,
  listResponse,
  parseListRequest,
  runList,
  type ExportAllOptions,
  type ListCondition,
  type ListEnforce,
  type ListField,
  type ListFieldType,
  type ListOp,
  type ListProvider,
  type ListRequest,
  type ListResult,
  type ListSort,
  type RunListOptions,
} from './list-query.js'
