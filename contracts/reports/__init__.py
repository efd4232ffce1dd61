"""Reports: the records and everything that reads, writes or renders them.

- ``schema``: the typed records (Summary, RowDetail, the nightly envelope), the status rules;
- ``bundle``: the one reader and writer of bundle folders;
- ``markdown``, ``html``, ``junit``, ``terminal``: renderers;
- ``diff``, ``merge``: bundles against bundles; ``upload``: to object storage;
- ``environment``: what ran the check.
"""
