"""The building blocks of a run's report page that a stage kind draws its section with:
HTML fragments (:mod:`.html`), matplotlib figures as data URIs (:mod:`.plots`), the section
interface (:mod:`.sections`) and a run's records as the page reads them (:mod:`.model`).
The pages themselves are :mod:`prereg.commands.report`.
"""
