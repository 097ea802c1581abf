// Page "consumers": not written yet.
import { h } from "../ui.js";

export default async function render({ main }) {
  main.append(h("h1", {}, "consumers"));
}
