"""The `ptread ls` table read back (check_cli.py and check_ls_torch.py)."""


def ls_row(head, line):
    """A row's [name, dtype, shape, device, bytes], read at the header's columns, or None when
    the row is not laid out as the header: name, dtype and shape padded to their columns (two
    spaces at least after each), then the device, and the bytes right-aligned to the header's
    end."""
    cols = [head.index(c) for c in ("DTYPE", "SHAPE", "DEVICE")]
    fields = [line[:cols[0]], line[cols[0]:cols[1]], line[cols[1]:cols[2]], line[cols[2]:]]
    if len(line) != len(head) or not all(f.endswith("  ") for f in fields[:3]):
        return None
    device, _, nbytes = fields[3].rstrip().rpartition(" ")  # (a device may hold spaces: "(1, 'x')")
    return [f.strip() for f in fields[:3]] + [device.strip(), nbytes]
