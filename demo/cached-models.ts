// The browser's weight cache as a list: each cached model with its size, a button to load it
// and one to delete it.
import { deleteCachedModel, listCachedModels, weightCacheAvailable, type CachedModel } from '../src/index.ts';
import { errorMessage, formatBytes } from './format.ts';

export interface CachedModelsActions {
  load(model: CachedModel): void;
  /** A failure to report in the page. */
  error(message: string): void;
}

export class CachedModelsList {
  /** While a model loads, the Load buttons are off (one model loads at a time). */
  private loadDisabled = false;

  constructor(
    private readonly container: HTMLElement,
    private readonly actions: CachedModelsActions,
  ) {}

  setLoadDisabled(disabled: boolean): void {
    this.loadDisabled = disabled;
    for (const load of this.container.querySelectorAll<HTMLButtonElement>('button.cached-load')) load.disabled = disabled;
  }

  async refresh(): Promise<void> {
    if (!weightCacheAvailable()) {
      this.container.replaceChildren(note('This page has no Cache Storage (it needs a secure context): models load from the network each time.'));
      return;
    }
    let models: CachedModel[];
    try {
      models = await listCachedModels();
    } catch (error) {
      this.container.replaceChildren(note(`The cache could not be read: ${errorMessage(error)}`));
      return;
    }
    if (models.length === 0) {
      this.container.replaceChildren(note('No models cached yet: models loaded by URL or repo id are kept here.'));
      return;
    }
    const list = document.createElement('ul');
    list.className = 'cached-list';
    for (const model of models.sort((a, b) => b.updated - a.updated)) list.append(this.item(model));
    this.container.replaceChildren(list);
  }

  private item(model: CachedModel): HTMLElement {
    const li = document.createElement('li');
    li.dataset.testid = 'cached-model';
    li.dataset.url = model.url;
    const name = Object.assign(document.createElement('span'), { className: 'cached-name', textContent: model.id, title: model.url });
    const size = Object.assign(document.createElement('span'), { className: 'cached-size', textContent: formatBytes(model.bytes) });
    size.title = model.files.join(', ');
    const load = button('Load', () => this.actions.load(model));
    load.className = 'cached-load';
    load.disabled = this.loadDisabled;
    const remove = button('Delete', async () => {
      remove.disabled = true;
      try {
        await deleteCachedModel(model.url);
      } catch (error) {
        this.actions.error(`Could not delete ${model.id} from the cache: ${errorMessage(error)}`);
      }
      await this.refresh();
    });
    remove.setAttribute('aria-label', `Delete ${model.id} from the cache`);
    load.setAttribute('aria-label', `Load ${model.id}`);
    li.append(name, size, load, remove);
    return li;
  }
}

function note(text: string): HTMLElement {
  return Object.assign(document.createElement('p'), { className: 'hint', textContent: text });
}

function button(label: string, onClick: () => void): HTMLButtonElement {
  const b = Object.assign(document.createElement('button'), { type: 'button', textContent: label });
  b.addEventListener('click', onClick);
  return b;
}
