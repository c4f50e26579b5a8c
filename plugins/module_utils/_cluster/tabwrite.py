# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: text tables laid out as kubectl lays them out (Go's text/tabwriter)."""

from __future__ import annotations


def tabwrite(text, padding=2):
    """Go's text/tabwriter (minwidth 0, tabwidth 0, padding 2, padchar ' ', no flags) over ``text``.

    A cell is text ending in a tab; a line's last, unterminated, cell is not part of a column. A
    column block is a run of consecutive lines that have a cell in that column; its width is its
    widest cell plus ``padding``. Trailing spaces are then stripped from each line (Go keeps them;
    the field report's outputs, which these tables are compared with, do not show them).
    """
    lines = [line.split("\t") for line in text.split("\n")]
    widths = [[None] * (len(cells) - 1) for cells in lines]

    def format_block(start, end, column):
        # lines start..end-1 all have a terminated cell in ``column``
        width = max(len(lines[i][column]) for i in range(start, end)) + padding
        for i in range(start, end):
            widths[i][column] = width
        # nested columns: sub-blocks of these lines having a cell in column + 1
        i = start
        while i < end:
            if len(lines[i]) - 1 > column + 1:
                j = i
                while j < end and len(lines[j]) - 1 > column + 1:
                    j += 1
                format_block(i, j, column + 1)
                i = j
            else:
                i += 1

    i = 0
    while i < len(lines):
        if len(lines[i]) > 1:
            j = i
            while j < len(lines) and len(lines[j]) > 1:
                j += 1
            format_block(i, j, 0)
            i = j
        else:
            i += 1
    out = []
    for cells, cell_widths in zip(lines, widths):
        parts = [cell.ljust(width) for cell, width in zip(cells[:-1], cell_widths)]
        out.append(("".join(parts) + cells[-1]).rstrip())
    return "\n".join(out)
