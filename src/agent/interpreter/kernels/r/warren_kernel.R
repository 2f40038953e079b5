# Warren's R kernel driver: runs one code-interpreter context's cells with `evaluate`.
#
# envd starts it (Rscript --vanilla) in the context's cwd and speaks ../PROTOCOL.md with it:
# execute requests as JSON lines on fd 0, events as JSON lines on fd 3, interrupts as SIGINT.
# Needs the jsonlite and evaluate packages (Debian's r-cran-jsonlite, r-cran-evaluate).
#
# As in Jupyter's IRkernel, only what R itself prints is a cell's output: text a child process
# writes straight to fd 1 or 2 (`system("echo hi")`) is not captured (R cannot redirect its
# own fds); `system(..., intern = TRUE)` returns it.

suppressPackageStartupMessages({
  library(jsonlite)
  library(evaluate)
})

# envd refuses event lines over 64 MiB; a longer text is cut to this.
MAX_TEXT_CHARS <- 16L * 1024L * 1024L
PLOT_PIXELS <- 504L # 7 inches at 72 dpi: R's default device size

# R opens neither /dev/fd/3 nor /proc/self/fd/3 when fd 3 is a socket (Node's stdio pipes
# are socketpairs): a `cat` that inherited fd 3 carries the lines there, in order.
events <- pipe("exec cat >&3", open = "wb")

emit <- function(event) {
  line <- toJSON(event, auto_unbox = TRUE, null = "null", digits = NA, force = TRUE)
  writeLines(enc2utf8(line), events, useBytes = TRUE)
  flush(events)
}

cut_text <- function(text) {
  text <- paste(enc2utf8(as.character(text)), collapse = "\n")
  if (nchar(text, type = "chars") > MAX_TEXT_CHARS) substr(text, 1L, MAX_TEXT_CHARS) else text
}

# --- environment ---------------------------------------------------------------------------

# The request's globals persist (a key missing from the next request's is removed); its env
# applies to this run only, then each key goes back to its global value or away.
globals_set <- character(0)

set_env <- function(vars) {
  if (length(vars) > 0) do.call(Sys.setenv, lapply(vars, as.character))
}

apply_globals <- function(globals) {
  gone <- setdiff(globals_set, names(globals))
  if (length(gone) > 0) Sys.unsetenv(gone)
  set_env(globals)
  globals_set <<- names(globals)
}

restore_env <- function(env, globals) {
  for (key in names(env)) {
    if (key %in% names(globals)) set_env(globals[key]) else Sys.unsetenv(key)
  }
}

# --- results -------------------------------------------------------------------------------

# A value's MIME bundle: its printed form, and a table for data frames.
represent <- function(value) {
  data <- list("text/plain" = cut_text(capture.output(print(value))))
  if (is.data.frame(value)) data[["text/html"]] <- html_table(value)
  data
}

html_escape <- function(x) {
  x <- gsub("&", "&amp;", x, fixed = TRUE)
  x <- gsub("<", "&lt;", x, fixed = TRUE)
  gsub(">", "&gt;", x, fixed = TRUE)
}

html_table <- function(frame) {
  shown <- utils::head(frame, 1000L)
  cells <- vapply(shown, function(column) html_escape(format(column, trim = TRUE, justify = "none")),
                  character(nrow(shown)))
  cells <- matrix(cells, nrow = nrow(shown))
  rows <- vapply(seq_len(nrow(shown)), function(i) {
    paste0("<tr><th>", html_escape(rownames(shown)[i]), "</th>",
           paste0("<td>", cells[i, ], "</td>", collapse = ""), "</tr>")
  }, "")
  head <- paste0("<tr><th></th>", paste0("<th>", html_escape(names(shown)), "</th>", collapse = ""), "</tr>")
  paste0("<table class=\"dataframe\">\n<thead>", head, "</thead>\n<tbody>\n",
         paste(rows, collapse = "\n"), "\n</tbody>\n</table>")
}

# A recorded plot drawn again into a PNG, base64-encoded.
render_plot <- function(plot) {
  path <- tempfile(fileext = ".png")
  shown <- grDevices::dev.cur()
  on.exit({
    unlink(path)
    if (shown > 1L) grDevices::dev.set(shown)
  })
  grDevices::png(path, width = PLOT_PIXELS, height = PLOT_PIXELS, type = "cairo")
  tryCatch(grDevices::replayPlot(plot), finally = grDevices::dev.off())
  list(
    "image/png" = gsub("\n", "", base64_enc(readBin(path, "raw", file.info(path)$size)), fixed = TRUE),
    "text/plain" = "plot without title"
  )
}

# --- execution -----------------------------------------------------------------------------

execution_count <- 0L

execute <- function(request) {
  id <- as.character(request$id)
  globals <- as.list(request$globals)
  env <- as.list(request$env)
  apply_globals(globals)
  set_env(env)
  on.exit(restore_env(env, globals))
  if (!isTRUE(request$silent)) {
    execution_count <<- execution_count + 1L
    emit(list(type = "execution_count", id = id, count = execution_count))
  }

  # The latest visible value waits: if nothing follows it, it is the cell's value (main).
  held <- NULL
  release <- function(main) {
    if (!is.null(held)) emit(list(type = "result", id = id, main = main, data = held))
    held <<- NULL
  }
  stream <- function(type, text) {
    release(FALSE)
    if (nzchar(text)) emit(list(type = type, id = id, text = cut_text(text)))
  }
  failure <- NULL
  handler <- new_output_handler(
    text = function(text) stream("stdout", text),
    message = function(m) stream("stderr", conditionMessage(m)),
    warning = function(w) stream("stderr", paste0("Warning message:\n", describe(w), "\n")),
    graphics = function(plot) {
      release(FALSE)
      emit(list(type = "result", id = id, main = FALSE, data = render_plot(plot)))
    },
    error = function(e) failure <<- e,
    value = function(value, visible) {
      if (visible) {
        release(FALSE)
        held <<- represent(value)
      }
      invisible(NULL)
    }
  )
  interrupted <- tryCatch({
    evaluate(as.character(request$code), envir = globalenv(), stop_on_error = 1L,
             new_device = TRUE, output_handler = handler)
    FALSE
  }, interrupt = function(i) TRUE)
  while (sink.number() > 0L) sink() # an interrupt can leave evaluate's capture open
  if (interrupted) {
    release(FALSE)
    emit(list(type = "error", id = id, name = "KeyboardInterrupt", value = "", traceback = ""))
  } else if (!is.null(failure)) {
    release(FALSE)
    message <- describe(failure)
    emit(list(type = "error", id = id, name = "ERROR", value = cut_text(message),
              traceback = cut_text(paste0("Error: ", message))))
  } else {
    release(TRUE)
  }
  finished <<- TRUE
  emit(list(type = "done", id = id))
}

# "in f(x): msg" as R prints a condition, without R's "Error"/"Warning" prefix; a cell's own
# top-level call (evaluate's `eval`) is not named, as R does not name the top level.
describe <- function(condition) {
  call <- conditionCall(condition)
  message <- conditionMessage(condition)
  if (is.null(call) || identical(call[[1L]], quote(eval))) message else paste0("in ", paste(deparse(call, nlines = 1L), collapse = ""), ": ", message)
}

# --- requests ------------------------------------------------------------------------------

requests <- file("stdin", open = "r")

# One request line; NULL at EOF. An interrupt that comes between runs is nothing to stop. R
# keeps one that lands in a read pending until its next check, anywhere: so the whole read
# runs under a handler, and `Sys.sleep` makes that check before the line goes to a cell.
next_request <- function() {
  line <- NULL
  repeat {
    read <- tryCatch({
      if (is.null(line)) line <- readLines(requests, n = 1L, warn = FALSE)
      Sys.sleep(0.001)
      TRUE
    }, interrupt = function(i) FALSE)
    if (!read) next
    if (length(line) == 0L) return(NULL)
    request <- if (nzchar(line)) tryCatch(fromJSON(line, simplifyVector = FALSE), error = function(e) NULL)
    if (is.list(request) && identical(request$type, "execute")) return(request)
    message("warren_kernel.R: a request that is not one dropped: ", substr(line, 1L, 200L))
    line <- NULL
  }
}

finished <- FALSE
emit(list(type = "ready"))
repeat {
  request <- next_request()
  if (is.null(request)) break
  finished <- FALSE
  # An interrupt outside the cell's own evaluation (a repeat landing as it ends) still ends it.
  tryCatch(execute(request), interrupt = function(i) NULL)
  if (!finished) {
    id <- as.character(request$id)
    emit(list(type = "error", id = id, name = "KeyboardInterrupt", value = "", traceback = ""))
    emit(list(type = "done", id = id))
  }
}
close(events)
quit(save = "no", status = 0L)
