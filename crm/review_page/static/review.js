// "select all on this page": ticks or clears every checkbox of the form named by data-name.
document.addEventListener("change", (event) => {
  const box = event.target;
  if (!box.classList || !box.classList.contains("select-all")) return;
  for (const other of box.form.querySelectorAll(`input[type=checkbox][name="${box.dataset.name}"]`)) {
    other.checked = box.checked;
  }
});
