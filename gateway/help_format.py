"""The help layout every ``higgs-gateway`` command shares: defaults shown, descriptions as written."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """argparse's own "(default: X)" suffix, left off where there is no default to show
    (None, a flag's False) so optional settings do not read "(default: None)"."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)
