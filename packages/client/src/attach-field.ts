import type { AttachmentView } from 'attach-storage'
import { AttachClient, type ClientError, type TemporaryFile } from './client.js'
import { AttachContainerBuilder, limiter, type ListedFile } from './container.js'
import { badgeOf, fileKind, mediaLabel, previewOf, rowError } from './media-label.js'
import { placeholderDataUrl } from './placeholder.js'

/** Uploads in flight at once over every field of the page (browsers open 6 connections per host). */
const uploads = limiter(4)

/** One row of the field. */
interface Item {
  key: number
  displayName: string
  /** A saved attachment. */
  saved?: AttachmentView
  /** The file being (or to be) uploaded. */
  file?: File
  temporary?: TemporaryFile
  state: 'saved' | 'queued' | 'uploading' | 'done' | 'failed'
  progress: number
  error?: ClientError
  abort?: AbortController
  thumb?: string
  noThumb?: boolean
  /** The record's ThumbHash as a `data:` URL, shown behind the thumbnail until it has loaded. */
  placeholder?: string
  /** A saved PDF's or video's preview image at full size: shown when the 96-pixel resize fails. */
  fallback?: string
  /** The row's picture (or icon), kept across renders so a loaded thumbnail is not fetched again. */
  visual?: HTMLElement
  row?: HTMLLIElement
}

/**
 * A photo the browser cannot show from the local file (HEIC/HEIF, what iPhones take; browsers other than
 * Safari do not decode it): its row shows the name and an icon until the server's JPEG of a saved record.
 * Some systems give such a file no type: the extension tells.
 */
const isHeicFile = (file: File) => /^image\/hei[cf](-sequence)?$/i.test(file.type) || (!file.type && /\.hei[cf]$/i.test(file.name))

/** A file's type, or for a HEIC/HEIF photo without one the type its extension names. */
const typeOf = (file: File) => file.type || (isHeicFile(file) ? `image/${file.name.slice(-4).toLowerCase()}` : '')

const CSS = `
:host{display:block;font:inherit;color:inherit}
.drop{border:2px dashed #8a94a6;border-radius:8px;padding:1rem;text-align:center;background:#f8fafc}
.drop.over{border-color:#2563eb;background:#eff6ff}
.pick{display:inline-block;padding:.4rem .9rem;border-radius:6px;background:#2563eb;color:#fff;cursor:pointer}
.pick:focus-within{outline:3px solid #93c5fd;outline-offset:2px}
.pick input{position:absolute;width:1px;height:1px;opacity:0;overflow:hidden}
.hint{display:block;margin-top:.4rem;font-size:.85em;color:#475569}
ul{list-style:none;margin:.6rem 0 0;padding:0;display:grid;gap:.4rem}
li{display:grid;grid-template-columns:48px 1fr auto;gap:.2rem .6rem;align-items:center;padding:.4rem;border:1px solid #cbd5e1;border-radius:6px;background:#fff}
li:focus{outline:3px solid #93c5fd}
li.dragging{opacity:.5}
li.failed{border-color:#dc2626;background:#fef2f2}
.thumb{width:48px;height:48px;object-fit:cover;border-radius:4px;grid-row:span 2;background:#e2e8f0 center/cover no-repeat}
.icon{width:48px;height:48px;display:grid;place-items:center;border-radius:4px;background:#e2e8f0;font-size:.7em;grid-row:span 2;overflow:hidden}
.visual{position:relative;width:48px;height:48px;grid-row:span 2}
.visual>.thumb,.visual>.icon{display:grid}
.pdf>.thumb{object-fit:contain}
.badge{position:absolute;right:2px;bottom:2px;padding:0 3px;border-radius:3px;background:rgba(15,23,42,.8);color:#fff;font-size:10px;line-height:14px;font-variant-numeric:tabular-nums;white-space:nowrap}
.pending::after{content:'';position:absolute;top:3px;right:3px;width:8px;height:8px;border:2px solid #64748b;border-top-color:transparent;border-radius:50%;animation:spin 1s linear infinite}
@keyframes spin{to{transform:rotate(360deg)}}
@media (prefers-reduced-motion:reduce){.pending::after{animation:none}}
.name{overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.status{grid-column:2;display:flex;gap:.5rem;align-items:center;font-size:.85em;color:#475569}
progress{width:10rem;height:.7rem}
.error{color:#b91c1c;font-weight:600}
.actions{grid-row:span 2;grid-column:3;display:flex;gap:.25rem}
button{font:inherit;font-size:.85em;padding:.2rem .5rem;border:1px solid #94a3b8;border-radius:4px;background:#fff;cursor:pointer}
button:focus{outline:3px solid #93c5fd}
button:disabled{opacity:.35;cursor:default}
.sr{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
`

let sheet: CSSStyleSheet | undefined
const styles = () => {
  if (!sheet) {
    sheet = new CSSStyleSheet()
    sheet.replaceSync(CSS)
  }
  return sheet
}

/** Sizes as `5242880`, `500KB`, `5MB`, `1GB`. */
export function parseSize(text: string | null): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB)?\s*$/i.exec(text ?? '')
  if (!m) return undefined
  const unit = { B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3 }[(m[2] ?? 'B').toUpperCase() as 'B']
  return Math.floor(Number(m[1]) * unit)
}

const formatSize = (n: number) => (n < 1024 ? `${n} B` : n < 1024 ** 2 ? `${(n / 1024).toFixed(1)} KB` : `${(n / 1024 ** 2).toFixed(1)} MB`)

/** Whether a file matches an `accept` list (`image/*,.pdf,text/plain`). */
function accepts(accept: string | null, file: File): boolean {
  if (!accept) return true
  const name = file.name.toLowerCase()
  return accept
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean)
    .some((a) => (a.startsWith('.') ? name.endsWith(a) : a.endsWith('/*') ? typeOf(file).startsWith(a.slice(0, -1)) : typeOf(file) === a))
}

function h<K extends keyof HTMLElementTagNameMap>(tag: K, props: Record<string, unknown> = {}, ...children: (Node | string)[]) {
  const el: HTMLElementTagNameMap[K] = Object.assign(document.createElement(tag), props)
  el.append(...children)
  return el
}

const Base = (globalThis.HTMLElement ?? class {}) as typeof HTMLElement

/**
 * `<attach-field name="attachContainer" domain="board" category="image" accept="image/*" max-size="5MB"
 * max-files="10">`: files picked or dropped are uploaded to the temporary area at once (progress,
 * cancel, retry per file); they can be reordered (drag, or Alt+Arrow keys on a row) and removed; the
 * hidden input named `name`, in the form's light DOM, holds the `attachContainer` JSON of the list.
 * Set `client` (an AttachClient with the token) before files are added; `setSaved(records)` shows a
 * saved reference's attachments for editing.
 *
 * Pictures: a chosen image shows from the local file at once, except a HEIC/HEIF photo (browsers do not
 * decode it), which shows its name and an icon until it is uploaded, then the server's JPEG of the
 * temporary file. A saved image shows a 96-pixel resize from the server
 * (JPEG for a HEIC photo), with the record's placeholder (`placeholderDataUrl()`) behind it until it has
 * loaded; its `<img>` carries `data-loaded` from then on. A picture that cannot be shown becomes the icon.
 *
 * PDFs and videos: a saved one whose preview is made (`preview: 'made'`) shows a 96-pixel resize of its
 * preview image, with a badge of its length (`1:05`) or pages (`12 p.`); while it is being made
 * (`pending`), its icon with a spinner, and the field looks its reference up again (`previewRetryDelays`)
 * until it is made or failed. A file refused by a virus scan says so on its row (`rowError`).
 */
export class AttachField extends Base {
  static observedAttributes = ['name', 'accept', 'domain', 'category', 'max-size', 'max-files']

  /** The client every field uses unless its own `client` is set. */
  static defaultClient = new AttachClient()
  /** The waits (ms) before each new lookup of saved records whose preview is being made: 5, about 30 s in all. */
  static previewRetryDelays = [1000, 2000, 4000, 8000, 16000]
  client: AttachClient | undefined

  #items: Item[] = []
  #removed: number[] = []
  #seq = 0
  #input: HTMLInputElement | undefined
  #fileInput!: HTMLInputElement
  #list!: HTMLUListElement
  #live!: HTMLElement
  #hint!: HTMLElement
  #dragKey: number | undefined

  get domain() {
    return this.getAttribute('domain') ?? ''
  }
  get category() {
    return this.getAttribute('category') || 'default'
  }
  get maxSize() {
    return parseSize(this.getAttribute('max-size'))
  }
  get maxFiles() {
    const n = Number(this.getAttribute('max-files'))
    return Number.isInteger(n) && n > 0 ? n : undefined
  }
  /** True while a file is queued or uploading. */
  get busy() {
    return this.#items.some((i) => i.state === 'queued' || i.state === 'uploading')
  }
  /** True when a file failed (it must be retried or removed before the list is saved). */
  get hasErrors() {
    return this.#items.some((i) => i.state === 'failed')
  }
  /** The `attachContainer` of the current list. */
  get value(): string {
    return JSON.stringify(this.container())
  }

  container() {
    const files: ListedFile[] = []
    for (const i of this.#items) {
      if (i.saved) files.push({ id: i.saved.id })
      else if (i.temporary && i.state === 'done') files.push({ temporary: i.temporary })
    }
    return new AttachContainerBuilder(this.domain)
      .category(this.category, files)
      .remove(...this.#removed)
      .build()
  }

  constructor() {
    super()
    const root = this.attachShadow({ mode: 'open' })
    root.adoptedStyleSheets = [styles()]
    this.#fileInput = h('input', { type: 'file', multiple: true })
    this.#fileInput.addEventListener('change', () => {
      this.addFiles([...(this.#fileInput.files ?? [])])
      this.#fileInput.value = ''
    })
    this.#hint = h('span', { className: 'hint', id: 'hint' })
    this.#fileInput.setAttribute('aria-describedby', 'hint')
    const drop = h(
      'div',
      { className: 'drop' },
      h('label', { className: 'pick' }, this.#fileInput, 'Choose files'),
      ' or drop them here',
      this.#hint,
    )
    this.#list = h('ul')
    this.#list.setAttribute('aria-label', 'Attached files (Alt+Up and Alt+Down move the focused file)')
    this.#live = h('div', { className: 'sr' })
    this.#live.setAttribute('aria-live', 'polite')
    this.#live.setAttribute('role', 'status')
    root.append(drop, this.#list, this.#live)

    const overFiles = (e: DragEvent) => e.dataTransfer?.types.includes('Files') ?? false
    this.addEventListener('dragover', (e) => {
      if (overFiles(e) || this.#dragKey !== undefined) e.preventDefault()
      if (overFiles(e)) drop.classList.add('over')
    })
    this.addEventListener('dragleave', () => drop.classList.remove('over'))
    this.addEventListener('drop', (e) => {
      drop.classList.remove('over')
      if (!overFiles(e)) return
      e.preventDefault()
      this.addFiles([...(e.dataTransfer?.files ?? [])])
    })
  }

  connectedCallback() {
    this.#sync()
    this.#watchPreviews()
  }

  disconnectedCallback() {
    this.#watching++
  }

  attributeChangedCallback() {
    this.#sync()
  }

  /**
   * Shows saved attachments (the lookup of the reference being edited), in their order. A PDF or video
   * whose preview is being made (`preview: 'pending'`) shows its icon until a new lookup of its reference
   * (a few, spaced out over about 30 s) finds it made.
   */
  setSaved(records: AttachmentView[]) {
    this.#items = records.map((r) => this.#savedItem(r, ++this.#seq))
    this.#removed = []
    this.#render()
    this.#watchPreviews()
  }

  #savedItem(r: AttachmentView, key: number): Item {
    const preview = previewOf(r)
    const pictured = r.fileType.startsWith('image/') || preview.state === 'made'
    return {
      key,
      displayName: r.displayName,
      saved: r,
      state: 'saved',
      progress: 100,
      // A PDF's or a video's 96-pixel thumbnail is a resize of its preview image (the view by id with a box).
      thumb: pictured ? this.#client.viewUrl(r.id, { w: 96, h: 96 }) : undefined,
      fallback: preview.state === 'made' ? preview.url : undefined,
      placeholder: placeholderDataUrl(r),
    }
  }

  /** Which round of preview lookups is current: a new list, or the field leaving the page, ends the one before. */
  #watching = 0

  /** Looks the references of rows with a pending preview up again, after each of `previewRetryDelays`, until none is pending. */
  #watchPreviews() {
    const round = ++this.#watching
    const pending = () => this.#items.filter((i) => i.saved?.preview === 'pending')
    const step = async (attempt: number) => {
      const delay = AttachField.previewRetryDelays[attempt]
      if (round !== this.#watching || delay === undefined || !pending().length) return
      await new Promise((resolve) => setTimeout(resolve, delay))
      if (round !== this.#watching) return
      // One lookup per reference and category the pending rows belong to.
      const groups = new Map<string, Item[]>()
      for (const item of pending()) {
        const r = item.saved!
        const key = JSON.stringify([r.refDomain, r.refKey, r.refCategory])
        groups.set(key, [...(groups.get(key) ?? []), item])
      }
      let changed = false
      for (const [key, items] of groups) {
        const [domain, refKey, category] = JSON.parse(key) as [string, string, string]
        const looked = await this.#client.lookup(domain, refKey, category)
        if (round !== this.#watching) return
        if (!looked.ok) continue
        const now = (looked.value[category] ?? []) as AttachmentView[]
        for (const item of items) {
          const fresh = now.find((r) => r.id === item.saved!.id)
          if (!fresh || fresh.preview === 'pending' || !this.#items.includes(item)) continue
          Object.assign(item, this.#savedItem(fresh, item.key), { visual: undefined, noThumb: false })
          changed = true
          if (fresh.preview === 'made') this.#announce(`Preview of ${item.displayName} ready`)
        }
      }
      if (changed) this.#render()
      await step(attempt + 1)
    }
    void step(0)
  }

  /** Adds files: checks them against `accept`, `max-size` and `max-files`, then uploads them. */
  addFiles(files: File[]) {
    const maxSize = this.maxSize
    const maxFiles = this.maxFiles
    for (const file of files) {
      const item: Item = { key: ++this.#seq, displayName: file.name, file, state: 'queued', progress: 0 }
      if (file.type.startsWith('image/') && !isHeicFile(file)) item.thumb = URL.createObjectURL(file)
      const count = this.#items.filter((i) => i.state !== 'failed').length
      if (maxFiles !== undefined && count >= maxFiles) {
        item.state = 'failed'
        item.error = { kind: 'filter', code: 'count', message: `At most ${maxFiles} files` }
      } else if (!accepts(this.getAttribute('accept'), file)) {
        item.state = 'failed'
        item.error = { kind: 'filter', code: 'type', message: 'This type of file is not accepted here' }
      } else if (maxSize !== undefined && file.size > maxSize) {
        item.state = 'failed'
        item.error = { kind: 'filter', code: 'size', message: `Larger than ${formatSize(maxSize)}` }
      }
      this.#items.push(item)
      if (item.error) this.#announce(`${file.name}: ${item.error.message}`)
      else void this.#upload(item)
    }
    this.#render()
  }

  get #client() {
    return this.client ?? AttachField.defaultClient
  }

  async #upload(item: Item) {
    item.state = 'queued'
    item.error = undefined
    item.progress = 0
    const abort = new AbortController()
    item.abort = abort
    this.#render()
    const maxSize = this.maxSize
    const result = await uploads(async () => {
      item.state = 'uploading'
      this.#render()
      this.#announce(`Uploading ${item.displayName}`)
      let shown = -1
      return this.#client.upload(item.file!, {
        refDomain: this.domain,
        refCategory: this.category,
        filters: maxSize === undefined ? undefined : { size: { maxSize: `${Math.ceil(maxSize / 1024)}KB` } },
        signal: abort.signal,
        onProgress: (loaded, total) => {
          item.progress = total ? Math.round((loaded / total) * 100) : 0
          if (item.progress !== shown) {
            shown = item.progress
            this.#update(item)
          }
        },
      })
    }, abort.signal).catch(() => undefined)
    item.abort = undefined
    if (!this.#items.includes(item)) return
    if (!result || (!result.ok && result.error.kind === 'aborted')) {
      item.state = 'failed'
      item.error = { kind: 'aborted', code: 'aborted', message: 'Cancelled' }
      this.#announce(`${item.displayName}: upload cancelled`)
    } else if (result.ok) {
      item.state = 'done'
      item.progress = 100
      item.temporary = result.value
      // A HEIC photo shows once it is up: the server's view of a temporary HEIC answers a JPEG.
      if (item.file && isHeicFile(item.file) && !item.thumb) {
        const url = this.#client.temporaryUrl(this.domain, this.category, result.value.name)
        item.thumb = `${url}?w=96&h=96`
        item.visual = undefined
      }
      this.#announce(`${item.displayName} uploaded`)
    } else {
      item.state = 'failed'
      item.error = rowError(result.error)
      this.#announce(`${item.displayName}: ${item.error.message}`)
    }
    this.#render()
  }

  #remove(item: Item) {
    item.abort?.abort()
    this.#items = this.#items.filter((i) => i !== item)
    if (item.saved) this.#removed.push(item.saved.id)
    if (item.thumb?.startsWith('blob:')) URL.revokeObjectURL(item.thumb)
    this.#announce(`${item.displayName} removed`)
    this.#render()
  }

  #move(item: Item, to: number) {
    const from = this.#items.indexOf(item)
    if (from < 0 || to < 0 || to >= this.#items.length || to === from) return
    this.#items.splice(from, 1)
    this.#items.splice(to, 0, item)
    this.#render()
    item.row?.focus()
    this.#announce(`${item.displayName} moved to position ${to + 1} of ${this.#items.length}`)
  }

  #announce(text: string) {
    this.#live.textContent = text
  }

  #sync() {
    this.#fileInput.accept = this.getAttribute('accept') ?? ''
    const name = this.getAttribute('name')
    if (name && !this.#input) {
      this.#input = h('input', { type: 'hidden' })
      this.append(this.#input)
    }
    if (this.#input && name) this.#input.name = name
    const parts = [
      this.getAttribute('accept') ? `Accepted: ${this.getAttribute('accept')}` : '',
      this.maxSize ? `up to ${formatSize(this.maxSize)} each` : '',
      this.maxFiles ? `at most ${this.maxFiles} files` : '',
    ].filter(Boolean)
    this.#hint.textContent = parts.join(', ')
    this.#fileInput.setAttribute('aria-label', `Choose files${parts.length ? ` (${parts.join(', ')})` : ''}`)
    this.#render()
  }

  /** Updates one row's progress without rebuilding the list. */
  #update(item: Item) {
    const p = item.row?.querySelector('progress')
    if (p) p.value = item.progress
    const pct = item.row?.querySelector('.pct')
    if (pct) pct.textContent = `${item.progress} %`
  }

  #render() {
    if (this.#input) this.#input.value = this.value
    const focused = this.shadowRoot?.activeElement
    const rows = this.#items.map((item, index) => this.#row(item, index))
    this.#list.replaceChildren(...rows)
    if (focused && rows.includes(focused as HTMLLIElement)) (focused as HTMLElement).focus()
    this.dispatchEvent(new Event('change', { bubbles: true }))
  }

  /**
   * The row's picture: the thumbnail over its placeholder until it has loaded, else the extension. A saved
   * video's or PDF's comes in a box with a badge of its length or pages, and a spinner while its preview
   * is being made.
   */
  #visual(item: Item): HTMLElement {
    if (item.visual) return item.visual
    const icon = () => h('span', { className: 'icon' }, (item.displayName.split('.').pop() ?? '').slice(0, 5).toUpperCase())
    let picture: HTMLElement
    if (!item.thumb || item.noThumb) picture = icon()
    else {
      const img = h('img', { className: 'thumb', alt: '' })
      if (item.placeholder) img.style.backgroundImage = `url("${item.placeholder}")`
      img.onload = () => {
        img.style.backgroundImage = ''
        img.dataset.loaded = ''
      }
      // A preview whose resize failed shows at full size; a file that is no displayable image after all
      // shows its extension instead.
      img.onerror = () => {
        if (item.fallback && img.getAttribute('src') !== item.fallback) {
          img.src = item.fallback
          return
        }
        item.noThumb = true
        const replacement = icon()
        if (item.visual === img) item.visual = replacement
        img.replaceWith(replacement)
      }
      img.src = item.thumb
      picture = img
    }
    const saved = item.saved
    const kind = saved ? fileKind(saved) : 'file'
    const badge = saved && (kind === 'video' || kind === 'pdf') ? badgeOf(saved) : ''
    const pending = saved?.preview === 'pending'
    if (!badge && !pending) {
      item.visual = picture
      return picture
    }
    const box = h('span', { className: `visual ${kind}${pending ? ' pending' : ''}` }, picture)
    if (pending) box.title = 'Preview being made'
    if (badge) {
      const b = h('span', { className: 'badge' }, badge)
      b.setAttribute('aria-hidden', 'true')
      box.append(b)
    }
    item.visual = box
    return box
  }

  #row(item: Item, index: number): HTMLLIElement {
    const n = this.#items.length
    const state = item.state
    const li = item.row ?? h('li', { tabIndex: 0, draggable: true })
    item.row = li
    li.className = state === 'failed' ? 'failed' : ''
    li.dataset.state = state
    li.setAttribute('aria-label', `${item.displayName}, ${index + 1} of ${n}${item.error ? `, error: ${item.error.message}` : ''}`)
    const visual = this.#visual(item)
    const status = h('span', { className: 'status' })
    if (state === 'queued' || state === 'uploading') {
      const progress = h('progress', { max: 100, value: item.progress })
      progress.setAttribute('aria-label', `Upload of ${item.displayName}`)
      status.append(progress, h('span', { className: 'pct' }, state === 'queued' ? 'waiting' : `${item.progress} %`))
    } else if (state === 'done') status.append('Uploaded, 100 %')
    else if (state === 'saved')
      status.append(
        [formatSize(item.saved!.fileSize), mediaLabel(item.saved), item.saved!.preview === 'pending' ? 'preview being made' : '']
          .filter(Boolean)
          .join(' · '),
      )
    else if (item.error) status.append(h('span', { className: 'error', role: 'alert' }, item.error.message))
    const button = (label: string, text: string, action: () => void, cls: string, disabled = false) => {
      const b = h('button', { type: 'button', className: cls, textContent: text, title: label, disabled })
      b.setAttribute('aria-label', label)
      b.addEventListener('click', action)
      return b
    }
    const actions = h('span', { className: 'actions' })
    if (n > 1)
      actions.append(
        button(`Move ${item.displayName} up`, '↑', () => this.#move(item, index - 1), 'up', index === 0),
        button(`Move ${item.displayName} down`, '↓', () => this.#move(item, index + 1), 'down', index === n - 1),
      )
    if (state === 'failed' && item.file && item.error?.kind !== 'filter')
      actions.append(button(`Retry ${item.displayName}`, 'Retry', () => void this.#upload(item), 'retry'))
    if (state === 'queued' || state === 'uploading')
      actions.append(button(`Cancel ${item.displayName}`, 'Cancel', () => item.abort?.abort(), 'cancel'))
    else actions.append(button(`Remove ${item.displayName}`, 'Remove', () => this.#remove(item), 'remove'))
    li.replaceChildren(visual, h('span', { className: 'name', title: item.displayName }, item.displayName), actions, status)

    li.onkeydown = (e) => {
      if (e.target !== li || !e.altKey) return
      if (e.key === 'ArrowUp') this.#move(item, this.#items.indexOf(item) - 1)
      else if (e.key === 'ArrowDown') this.#move(item, this.#items.indexOf(item) + 1)
      else return
      e.preventDefault()
    }
    li.ondragstart = (e) => {
      this.#dragKey = item.key
      li.classList.add('dragging')
      e.dataTransfer?.setData('text/plain', item.displayName)
    }
    li.ondragend = () => {
      this.#dragKey = undefined
      li.classList.remove('dragging')
    }
    li.ondrop = (e) => {
      const dragged = this.#items.find((i) => i.key === this.#dragKey)
      if (!dragged) return
      e.preventDefault()
      e.stopPropagation()
      this.#dragKey = undefined
      this.#move(dragged, this.#items.indexOf(item))
    }
    return li
  }
}

/** Registers `<attach-field>` (once). */
export function defineAttachField(name = 'attach-field') {
  if (globalThis.customElements && !customElements.get(name)) customElements.define(name, AttachField)
}
