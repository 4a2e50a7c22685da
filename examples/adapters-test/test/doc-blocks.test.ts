/**
 * Docs that cannot drift: every TypeScript and JavaScript block of README.md and docs/**\/*.md is
 * type-checked against the workspace packages (doc-blocks-kit.ts says how, and which markers a page
 * may put before a block), one test per block, failing with the page's file and line of each error.
 */
import { beforeAll, describe, expect, it } from 'vitest'
import { type BlockProblem, checkBlocks, type DocBlock, docPages, extractBlocks, where } from './doc-blocks-kit.js'

const blocks = docPages().flatMap((page) => extractBlocks(page))
const label = (b: DocBlock) => `${where(b)} (${b.lang}${b.mode === 'check' ? '' : `, ${b.mode}`})`

describe('doc blocks type-check against the packages', () => {
  // One program for the TypeScript blocks, one for the JavaScript ones (it reuses the parsed files).
  let problems: Map<DocBlock, BlockProblem[]>
  beforeAll(() => {
    problems = checkBlocks(blocks)
  }, 300_000)

  it('finds the blocks of README.md and docs/', () => {
    expect(blocks.filter((b) => b.file === 'README.md' && b.lang === 'ts').length).toBeGreaterThanOrEqual(1)
    expect(blocks.length).toBeGreaterThanOrEqual(25)
    // A marker naming a host thing that does not exist is an error of the page, not silently nothing.
    for (const b of blocks) expect(b.unknownUses, where(b)).toEqual([])
  })

  for (const block of blocks) {
    if (block.mode === 'skip') {
      it.skip(`${label(block)}: ${block.reason || 'skipped by its marker'}`, () => {})
      continue
    }
    it(label(block), () => {
      const found = problems.get(block) ?? []
      const report = found.map((p) => `${p.at}: ${p.message}`).join('\n')
      expect(report, `${where(block)} does not type-check:\n${report}`).toBe('')
    })
  }
})
