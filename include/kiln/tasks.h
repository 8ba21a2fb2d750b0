// <kiln/tasks.h>: the classification task base that image, text and keyword classification share.
// Part of kiln's public API (docs/library.md); the headers it includes are installed with it.
#pragma once

#include "tasks/classification_task.h"
