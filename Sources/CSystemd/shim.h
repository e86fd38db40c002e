#ifndef CSYSTEMD_SHIM_H
#define CSYSTEMD_SHIM_H

// Callers send CODE_FILE/CODE_LINE/CODE_FUNC themselves: the automatic ones
// would point into this header.
#define SD_JOURNAL_SUPPRESS_LOCATION 1

#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>

#endif
