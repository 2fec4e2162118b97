"""Readers of other tools' output, built on the ecosystem's libraries.

* :func:`from_cmdstan` (:mod:`.cmdstan`): CmdStan CSV files (``cmdstanpy.from_csv``), a cmdstanpy
  ``CmdStanMCMC`` (``arviz_base.from_cmdstanpy``) or a PyStan 3 fit (:mod:`.pystan`,
  ``arviz_base.from_pystan``) to a DataTree; :func:`read_cmdstan_csv` for one file with its
  configuration.
* :func:`read_rdump` (:mod:`.rdump`): R dump data (``.data.R``), through cmdstanpy's value parser.

:mod:`.groups` holds what the readers add to the converters. This package imports neither
:mod:`ppl_loo.workflow` nor the adapters.
"""

from .cmdstan import CmdStanCSV, from_cmdstan, read_cmdstan_csv
from .pystan import from_pystan_fit, pystan_messages
from .rdump import read_rdump

__all__ = ["CmdStanCSV", "from_cmdstan", "from_pystan_fit", "pystan_messages", "read_cmdstan_csv", "read_rdump"]
