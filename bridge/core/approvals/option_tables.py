"""The options the gate knows, per program and subcommand, each table with its source.

Each table was read from the program's ``--help`` or manual page as Debian 12 (bookworm)
ships it (the version is in the source). Only options that neither write nor run anything
are plain; options that write a named file are ``=write``; options that run a program, open
an editor or pager the gate cannot see, or write where no word says, are ``!``. An option
that is not here asks: a table need not be complete, only right about what it lists.

The language is described in :mod:`options`. docs/approvals.md lists the programs; an
operator extends them with ``[approvals] options``.
"""

from __future__ import annotations

from functools import cache
from types import MappingProxyType

from bridge.core.approvals.options import Style, Table, Tables, Writes, parse_spec

# --- git (git 2.39.5, Debian 12: git-diff(1), git-log(1), git-rev-list(1) …) ---------------

# The diff options shared by diff, log, show, stash show (git-diff(1) "OPTIONS").
_GIT_DIFF = """
-p -u --patch -s --no-patch -U= --unified= --output=write --output-indicator-new=
--output-indicator-old= --output-indicator-context= --raw --patch-with-raw -t
--indent-heuristic --minimal --patience --histogram --anchored= --diff-algorithm=
--stat=? --stat-width= --stat-name-width= --stat-count= --stat-graph-width=
--compact-summary --numstat --shortstat -X=? --dirstat=? --cumulative --dirstat-by-file=?
--summary --patch-with-stat -z --name-only --name-status --submodule=? --color=?
--color-moved=? --color-moved-ws= --word-diff=? --word-diff-regex= --color-words=?
--renames --rename-empty --check --ws-error-highlight= --full-index --binary --abbrev=?
-B=? --break-rewrites=? -M=? --find-renames=? -C=? --find-copies=? --find-copies-harder -D
--irreversible-delete -l= --diff-filter= -S= -G= --find-object= --pickaxe-all
--pickaxe-regex -O= --skip-to= --rotate-to= -R --relative=? -a --text --ignore-cr-at-eol
--ignore-space-at-eol -b --ignore-space-change -w --ignore-all-space --ignore-blank-lines
-I= --ignore-matching-lines= --inter-hunk-context= -W --function-context --exit-code
--quiet --ext-diff! --textconv! --ignore-submodules=? --src-prefix= --dst-prefix= --prefix
--default-prefix --line-prefix= --ita-invisible-in-index --ita-visible-in-index
"""
# Commit limiting and formatting shared by log, show, shortlog, rev-list (git-log(1)).
_GIT_REVS = """
-n= --max-count= --skip= --since= --after= --since-as-filter= --until= --before= --author=
--committer= --grep-reflog= --grep= --all-match --invert-grep -i --regexp-ignore-case
--basic-regexp -E --extended-regexp -F --fixed-strings -P --perl-regexp --remove-empty
--merges --min-parents= --max-parents= --first-parent --exclude-first-parent-only --not
--all --branches=? --tags=? --remotes=? --glob= --exclude= --reflog --alternate-refs
--single-worktree --ignore-missing --cherry-mark --cherry-pick --left-only --right-only
--cherry -g --walk-reflogs --merge --boundary --simplify-by-decoration --show-pulls
--full-history --dense --sparse --simplify-merges --ancestry-path=? --date-order
--author-date-order --topo-order --reverse --no-walk=? --do-walk --pretty=? --format=
--abbrev-commit --oneline --encoding= --expand-tabs=? --notes=? --show-notes=?
--standard-notes --show-signature --relative-date --date= --parents --children
--left-right --graph --show-linear-break=? -c --cc -m -r --diff-merges= --remerge-diff
--combined-all-paths --decorate=? --decorate-refs= --decorate-refs-exclude=
--clear-decorations --source --mailmap --use-mailmap --full-diff --log-size -L= --follow
--count --objects --objects-edge --no-object-names --in-commit-order
"""
_GIT_GLOBAL = """
-p --paginate -P --no-pager --no-replace-objects --exec-path=?! --literal-pathspecs --glob-pathspecs
--noglob-pathspecs --icase-pathspecs --no-optional-locks --version --namespace=
-C=! -c=! --git-dir=! --work-tree=! --config-env=! --list-cmds=! --bare!
"""
_STASH_PUSH = """
-k --keep-index -S --staged -u --include-untracked -a --all -q --quiet -m= --message=
--pathspec-from-file= --pathspec-file-nul --only-untracked -p! --patch!
"""
_GIT = {
    "git": _GIT_GLOBAL,
    "git status": """
-s --short -b --branch --show-stash --porcelain=? --long -v --verbose -u=?
--untracked-files=? --ignore-submodules=? --ignored=? -z --column=? --ahead-behind
--renames --find-renames=?
""",
    "git diff": _GIT_DIFF + " --cached --staged --merge-base --no-index --cc -c -m -0 -1 -2 -3",
    "git log": _GIT_DIFF + _GIT_REVS,
    "git show": _GIT_DIFF + _GIT_REVS,
    "git shortlog": _GIT_REVS + " -s --summary -n --numbered -e --email --group= -w=?",
    "git reflog": _GIT_DIFF + _GIT_REVS,
    "git rev-list": _GIT_REVS
    + " --header --timestamp --bisect --bisect-vars --bisect-all --stdin --quiet --disk-usage=?",
    "git blame": """
-b --root --show-stats -L= -l -t -S= --reverse= --first-parent -p --porcelain
--line-porcelain --incremental --encoding= --contents= --date= --progress -M=? -C=?
--ignore-rev= --ignore-revs-file= --color-lines --color-by-age --minimal -e --show-email -w
--abbrev=? -c -f --show-name -n --show-number -s
""",
    "git branch": """
-a --all -r --remotes -l --list -v --verbose -q --quiet --abbrev=? --column=? --sort=
--merged=? --no-merged=? --contains=? --no-contains=? --points-at= --format= --show-current
--color=? -i --ignore-case --omit-empty
""",
    "git tag": """
-l --list -n=? --sort= --contains=? --no-contains=? --merged=? --no-merged=? --points-at=
--column=? --format= --color=? -i --ignore-case --omit-empty -m= --message=
""",
    "git rev-parse": """
--abbrev-ref=? --short=? --verify -q --quiet --show-toplevel --git-dir --git-common-dir
--is-inside-work-tree --is-inside-git-dir --is-bare-repository --is-shallow-repository
--show-prefix --show-cdup --symbolic --symbolic-full-name --all --branches=? --tags=?
--remotes=? --glob= --exclude= --absolute-git-dir --show-superproject-working-tree
--show-object-format=? --show-ref-format --path-format= --default= --revs-only --no-revs
--flags --no-flags --sq --not --since= --after= --until= --before= --disambiguate=
--local-env-vars --git-path= --shared-index-path
""",
    "git ls-files": """
-c --cached -d --deleted -m --modified -o --others -i --ignored -s --stage --directory
--empty-directory -u --unmerged -k --killed -z -t -v -f --full-name --recurse-submodules
--abbrev=? --debug --eol --deduplicate -x= --exclude= -X= --exclude-from=
--exclude-per-directory= --exclude-standard --error-unmatch --with-tree= --format= --sparse
""",
    "git ls-tree": """
-d -r -t -l --long -z --name-only --name-status --object-only --full-name --full-tree
--abbrev=? --format=
""",
    "git grep": """
-a --text -i --ignore-case -I --max-depth= -r --recursive -w --word-regexp -v
--invert-match -h -H --full-name -E --extended-regexp -G --basic-regexp -P --perl-regexp
-F --fixed-strings -n --line-number --column -l --files-with-matches --name-only -L
--files-without-match -z --null -o --only-matching -c --count --color=? --break --heading
-p --show-function -A= --after-context= -B= --before-context= -C= --context= -W
--function-context --threads= -f= -e= --and --or --not --all-match -q --quiet --cached
--untracked --no-index --exclude-standard --recurse-submodules -m= --max-count=
--textconv!
""",
    "git describe": """
--all --tags --contains --abbrev=? --candidates= --exact-match --debug --long --match=
--exclude= --always --first-parent --dirty=? --broken=?
""",
    "git cat-file": """
-t -s -e -p --batch=? --batch-check=? --batch-command=? --batch-all-objects --buffer
--follow-symlinks --unordered --allow-unknown-type --use-mailmap --textconv! --filters!
""",
    "git merge-base": "-a --all --octopus --independent --is-ancestor --fork-point",
    "git show-ref": "--head --heads --tags -d --dereference -s --hash=? --verify --abbrev=? -q"
    " --quiet --exclude-existing=?",
    "git for-each-ref": """
--count= --sort= --format= --color=? --shell --perl --python --tcl --points-at= --merged=?
--no-merged=? --contains=? --no-contains=? --ignore-case --omit-empty
""",
    "git remote": "-v --verbose",
    "git difftool": """
--tool-help -y --no-prompt --prompt -d --dir-diff -g --gui --trust-exit-code --symlinks
--cached --staged
""",
    "git fetch": """
-q --quiet -v --verbose --all -a --append -p --prune -P --prune-tags -t --tags -n --dry-run
--depth= --deepen= --shallow-since= --shallow-exclude= --unshallow --update-shallow
--progress -j= --jobs= --recurse-submodules=? --set-upstream -4 -6 --ipv4 --ipv6
--negotiation-tip= --negotiate-only --filter= --refetch --write-fetch-head
--auto-maintenance --auto-gc --show-forced-updates -k --keep -f! --force! -u!
--update-head-ok! --refmap=! --multiple! --stdin!
""",
    "git clone": """
-q --quiet -v --verbose --progress -n --no-checkout --bare --mirror -l --local
--no-hardlinks -s --shared --dissociate -o= --origin= -b= --branch= --depth=
--shallow-since= --shallow-exclude= --single-branch --tags --recurse-submodules=?
--shallow-submodules --remote-submodules -j= --jobs= --filter= --also-filter-submodules
--sparse --reject-shallow --reference=! --reference-if-able=! --separate-git-dir=!
""",
    "git add": """
-n --dry-run -v --verbose -f --force -u --update -A --all --ignore-removal -N
--intent-to-add --refresh --ignore-errors --ignore-missing --sparse --chmod= --renormalize
--pathspec-from-file= --pathspec-file-nul -i! --interactive! -p! --patch! -e! --edit!
""",
    "git commit": """
-a --all --fixup= --squash= --reset-author --short --branch --porcelain --long -z --null
-F= --file= --author= --date= -m= --message= -s --signoff --trailer= -n --no-verify
--verify --allow-empty --allow-empty-message --cleanup= --no-edit -i --include -o --only
--pathspec-from-file= --pathspec-file-nul -u=? --untracked-files=? -v --verbose -q --quiet
--dry-run --status --amend -C= --reuse-message=
-p! --patch! -c=! --reedit-message=! -t=! --template=! -e! --edit! -S=?! --gpg-sign=?!
""",
    "git switch": """
-c= --create= -d --detach --guess -m --merge --conflict= -q --quiet --progress -t=?
--track=? --orphan= --ignore-other-worktrees --recurse-submodules
-C=! --force-create=! -f! --force! --discard-changes!
""",
    "git checkout": """
-b= -q --quiet --progress -t --track=? --guess -l -d --detach --orphan=
--ignore-skip-worktree-bits -m --merge --conflict= --ignore-other-worktrees
--overwrite-ignore --recurse-submodules --overlay --pathspec-from-file= --pathspec-file-nul
--ours --theirs -B=! -f! --force! -p! --patch!
""",
    # `git stash` alone is `git stash push`; a word after it picks the subcommand.
    "git stash": _STASH_PUSH,
    "git stash push": _STASH_PUSH,
    "git stash save": _STASH_PUSH,
    "git stash show": _GIT_DIFF + " --include-untracked --only-untracked -u",
    "git stash list": _GIT_DIFF + _GIT_REVS,
    "git stash pop": "--index -q --quiet",
    "git stash apply": "--index -q --quiet",
    "git stash drop": "-q --quiet",
    "git stash branch": "",
    "git stash create": "",
    "git stash clear": "",
}

# --- coreutils 9.1, grep 3.8, diffutils 3.8, findutils 4.9, sed 4.9 (Debian 12) ----------

_GNU = {
    "ls": """
-a --all -A --almost-all --author -b --escape --block-size= -B --ignore-backups -c -C
--color=? -d --directory -D --dired -f -F --classify=? --file-type --format= --full-time
-g --group-directories-first -G --no-group -h --human-readable --si -H
--dereference-command-line --dereference-command-line-symlink-to-dir --hide=
--hyperlink=? --indicator-style= -i --inode -I= --ignore= -k --kibibytes -l -L
--dereference -m -n --numeric-uid-gid -N --literal -o -p -q --hide-control-chars
--show-control-chars -Q --quote-name --quoting-style= -r --reverse -R --recursive -s
--size -S --sort= --time= --time-style= -t -T= --tabsize= -u -U -v -w= --width= -x -X -Z
--context --zero -1 --help --version
""",
    "cat": """
-A --show-all -b --number-nonblank -e -E --show-ends -n --number -s --squeeze-blank -t -T
--show-tabs -u -v --show-nonprinting --help --version
""",
    "head": "-c= --bytes= -n= --lines= -q --quiet --silent -v --verbose -z --zero-terminated"
    " --help --version",
    "tail": """
-c= --bytes= -f --follow=? -F -n= --lines= --max-unchanged-stats= --pid= -q --quiet
--silent --retry -s= --sleep-interval= -v --verbose -z --zero-terminated --help --version
""",
    "wc": "-c --bytes -m --chars -l --lines --files0-from= -L --max-line-length -w --words"
    " --total= --help --version",
    "sort": """
-b --ignore-leading-blanks -d --dictionary-order -f --ignore-case -g --general-numeric-sort
-i --ignore-nonprinting -M --month-sort -h --human-numeric-sort -n --numeric-sort -R
--random-sort --random-source= -r --reverse --sort= -V --version-sort --batch-size= -c
--check=? -C --debug --files0-from= -k= --key= -m --merge -s --stable -S= --buffer-size=
-t= --field-separator= --parallel= -u --unique -z --zero-terminated --help --version
-o=write --output=write -T=write --temporary-directory=write --compress-program=!
""",
    "uniq": """
-c --count -d --repeated -D --all-repeated=? -f= --skip-fields= --group=? -i --ignore-case
-s= --skip-chars= -u --unique -z --zero-terminated -w= --check-chars= --help --version
""",
    "cut": """
-b= --bytes= -c= --characters= -d= --delimiter= -f= --fields= -n --complement -s
--only-delimited --output-delimiter= -z --zero-terminated --help --version
""",
    "stat": "-L --dereference -f --file-system --cached= -c= --format= --printf= -t --terse"
    " --help --version",
    "du": """
-0 --null -a --all --apparent-size -B= --block-size= -b --bytes -c --total -D
--dereference-args -d= --max-depth= --files0-from= -H -h --human-readable --inodes -k -L
--dereference -l --count-links -m -P --no-dereference -S --separate-dirs --si -s
--summarize -t= --threshold= --time=? --time-style= -X= --exclude-from= --exclude= -x
--one-file-system --help --version
""",
    "pwd": "-L --logical -P --physical --help --version",
    "grep": """
-E --extended-regexp -F --fixed-strings -G --basic-regexp -P --perl-regexp -e= --regexp=
-f= --file= -i --ignore-case --no-ignore-case -w --word-regexp -x --line-regexp -z
--null-data -s --no-messages -v --invert-match -V --version --help -m= --max-count= -b
--byte-offset -n --line-number --line-buffered -H --with-filename -h --no-filename
--label= -o --only-matching -q --quiet --silent --binary-files= -a --text -I -d=
--directories= -D= --devices= -r --recursive -R --dereference-recursive --include=
--exclude= --exclude-from= --exclude-dir= -L --files-without-match -l
--files-with-matches -c --count -T --initial-tab -Z --null -B= --before-context= -A=
--after-context= -C= --context= --group-separator= --no-group-separator --color=?
--colour=? -U --binary
""",
    "diff": """
--normal -q --brief -s --report-identical-files -c -C= --context=? -u -U= --unified=? -e
--ed -n --rcs -y --side-by-side -W= --width= --left-column --suppress-common-lines -p
--show-c-function -F= --show-function-line= --label= -t --expand-tabs -T --initial-tab
--tabsize= --suppress-blank-empty -r --recursive --no-dereference -N --new-file
--unidirectional-new-file --ignore-file-name-case --no-ignore-file-name-case -x= --exclude=
-X= --exclude-from= -S= --starting-file= --from-file= --to-file= -i --ignore-case -E
--ignore-tab-expansion -Z --ignore-trailing-space -b --ignore-space-change -w
--ignore-all-space -B --ignore-blank-lines -I= --ignore-matching-lines= -a --text
--strip-trailing-cr -D= --ifdef= --line-format= --old-line-format= --new-line-format=
--unchanged-line-format= --old-group-format= --new-group-format=
--unchanged-group-format= --changed-group-format= -d --minimal --horizon-lines=
--speed-large-files --color=? --palette= --help -v --version -l! --paginate!
""",
    "sed": """
-n --quiet --silent --debug --posix -E -r --regexp-extended -s --separate -u --unbuffered
-z --null-data -l= --line-length= --sandbox --follow-symlinks --help --version
-e= --expression= -i=?> --in-place=?> -f=! --file=!
""",
    "file": """
-b --brief -c --checking-printout -E -e= --exclude= --exclude-quiet= -F= --separator= -h
--no-dereference -i --mime --mime-type --mime-encoding -k --keep-going -l --list -L
--dereference -N --no-pad -n --no-buffer -0 --print0 -p --preserve-date -P= --parameter= -r
--raw -s --special-files -S --no-sandbox -z --uncompress -Z --uncompress-noreport --extension
--apple --help -v --version -f= --files-from= -m= --magic-file=
-C! --compile! -z! --uncompress! -Z! --uncompress-noreport!
""",
    "which": "-a -s",
    "less": """
-? --help -a --search-skip-screen -A --SEARCH-SKIP-SCREEN -b= --buffers= -B
--auto-buffers -c --clear-screen -C --CLEAR-SCREEN -d --dumb -e --quit-at-eof -E
--QUIT-AT-EOF -f --force -F --quit-if-one-screen -g --hilite-search -G
--HILITE-SEARCH -h= --max-back-scroll= -i --ignore-case -I --IGNORE-CASE -j= --jump-target=
-J --status-column -L --no-lessopen -m --long-prompt -M --LONG-PROMPT -n
--line-numbers -N --LINE-NUMBERS -p= --pattern= -q --quiet --silent -Q --QUIET
--SILENT -r --raw-control-chars -R --RAW-CONTROL-CHARS -s --squeeze-blank-lines -S
--chop-long-lines -u --underline-special -U --UNDERLINE-SPECIAL -V --version -w
--hilite-unread -W --HILITE-UNREAD -x= --tabs= -X --no-init -y= --max-forw-scroll= -z=
--window= --mouse --wheel-lines= --use-color --no-vbell --file-size --incsearch
--line-num-width= --status-col-width= -o=write --log-file=write -O=write
--LOG-FILE=write -k=! --lesskey-file=! --lesskey-src=! --lesskey-content=! -t=! --tag=!
-T=! --tag-file=!
""",
    "man": """
-l --local-file -a --all -w --where --path --location -W --where-cat --location-cat -k
--apropos -K --global-apropos -f --whatis -M= --manpath= -L= --locale= -S= -s= --sections=
-E= --encoding= --no-hyphenation --nh --no-justification --nj -7 --ascii -i --ignore-case
-I --match-case --regex --wildcard --names-only -u --update! --no-subpages -Z --ditroff
-? --help -V --version -C=! --config-file=! -P=! --pager=! -H=?! --html=?! -t! --troff!
-T=?! --troff-device=?! -X=?! --gxditview=?! -p=! --preprocessor=! -R=! --recode=!
""",
    "split": """
-a= --suffix-length= --additional-suffix= -b= --bytes= -C= --line-bytes= -d
--numeric-suffixes=? -x --hex-suffixes=? -e --elide-empty-files -l= --lines= -n= --number=
-t= --separator= -u --unbuffered --verbose --help --version --filter=!
""",
    "tar": """
-A --catenate --concatenate -c --create -d --diff --compare --delete -r --append -t
--list -u --update -x --extract --get -f=write --file=write -C=write --directory=write -v
--verbose -z --gzip -j --bzip2 -J --xz --zstd --lzma --lzip --lzop -a --auto-compress
-O --to-stdout -k --keep-old-files --skip-old-files --keep-newer-files -p
--preserve-permissions --same-owner --no-same-owner -m --touch --exclude= -X=
--exclude-from= --exclude-vcs --exclude-caches -h --dereference -P --absolute-names
--strip-components= --wildcards --anchored --numeric-owner --owner= --group= --mode=
--mtime= --sort= -T= --files-from= --null -b= --blocking-factor= -B --read-full-records -i
--ignore-zeros --checkpoint=? --totals=? -w --interactive --confirmation -W --verify
--show-transformed-names --transform= --xform= --one-file-system -l --check-links -S
--sparse -R --block-number --index-file=write -V=write --label=write -M! --multi-volume!
-I=! --use-compress-program=! --to-command=! --checkpoint-action=! --info-script=!
-F=! --new-volume-script=! --rsh-command=! --rmt-command=! --force-local
--help --version --usage
""",
    "make": """
-b -m -B --always-make -d --debug=? -e --environment-overrides -i --ignore-errors -I=
--include-dir= -j=? --jobs=? -k --keep-going -l=? --load-average=? --max-load=? -L
--check-symlink-times -n --just-print --dry-run --recon -o= --old-file= --assume-old= -O=?
--output-sync=? -p --print-data-base -q --question -r --no-builtin-rules -R
--no-builtin-variables -s --silent --quiet --no-silent -S --no-keep-going --stop -t! --touch!
--trace -v --version -w --print-directory --no-print-directory -W= --what-if= --new-file=
--assume-new= --warn-undefined-variables --help
-C=! --directory=! -f=! --file=! --makefile=! -E=! --eval=!
""",
}

# Which operands the programs above write (the rest of them write none: their operands are
# files they read, patterns, or names): `uniq [INPUT [OUTPUT]]`, `split [FILE [PREFIX]]`
# (coreutils 9.1 --help). `sed -i` makes sed's operands written (its table's `>`).
_GNU_WRITES: dict[str, Writes] = {"uniq": "second", "split": "second"}

# Programs the gate has no table of options for (every option asks), whose written operands
# are known (coreutils 9.1 and their manuals, Debian 12). Any other program writes every
# operand: a word that names no path outside the workspace is fine, one that does asks.
WRITES_OPERANDS: dict[str, Writes] = {
    "cp": "last",  # cp SRC DEST, cp SRC... DIR (`-t DIR` is an option)
    "ln": "last",  # ln TARGET LINK, ln TARGET... DIR (one operand: a link in the cwd)
    "install": "last",  # install SRC DEST, install SRC... DIR (`-d DIR...`: options ask)
    "rsync": "last",  # rsync SRC... DEST (rsync 3.2.7)
    "mv": "all",  # the sources are removed where they are: a write there
    "tee": "all",
    "touch": "all",
    "mkdir": "all",
    "rmdir": "all",
    "rm": "all",
    "unlink": "all",
    "truncate": "all",
    "shred": "all",
    "chmod": "all",
    "chown": "all",
    "chgrp": "all",
    "dd": "of",  # dd if=IN of=OUT: only `of=` names a file written
}

# Tables of programs outside coreutils, each with its own source.
_OTHERS: dict[str, tuple[str, Style, str]] = {
    "rg": (
        "rg --help, ripgrep 13.0.0 (Debian 12)",
        "clap",
        """
-A= --after-context= --auto-hybrid-regex --binary -B= --before-context= --block-buffered -b
--byte-offset -s --case-sensitive --color= --colors= --column -C= --context=
--context-separator= --no-context-separator -c --count --count-matches --crlf --debug
--dfa-size-limit= -E= --encoding= --engine= --field-context-separator=
--field-match-separator= -f= --file= --files -l --files-with-matches --files-without-match
-F --fixed-strings -L --follow -g= --glob= --glob-case-insensitive -h --help --heading
--hidden --iglob= -i --ignore-case --ignore-file= --ignore-file-case-insensitive
--include-zero -v --invert-match --json --line-buffered -n --line-number -x --line-regexp
-M= --max-columns= --max-columns-preview -m= --max-count= --max-depth= --max-filesize=
--mmap -U --multiline --multiline-dotall --no-config -I --no-filename --no-heading
--no-ignore --no-ignore-dot --no-ignore-exclude --no-ignore-files --no-ignore-global
--no-ignore-messages --no-ignore-parent --no-ignore-vcs -N --no-line-number --no-messages
--no-mmap --no-pcre2-unicode --no-require-git --no-unicode -0 --null --null-data
--one-file-system -o --only-matching --passthru --path-separator= -P --pcre2
--pcre2-version -p --pretty -q --quiet --regex-size-limit= -e= --regexp= -r= --replace= -S
--smart-case --sort= --sortr= --stats -a --text -j= --threads= --trim -t= --type=
--type-add= --type-clear= --type-list -T= --type-not= -u --unrestricted -V --version
--vimgrep -H --with-filename -w --word-regexp --no-ignore-case --no-pcre2 --no-unrestricted
-z! --search-zip! --pre=! --pre-glob=!
""",
    ),
    "fd": (
        "fd --help, fd-find 8.6.0 (Debian 12; installed as fdfind)",
        "clap",
        """
-H --hidden -I --no-ignore --no-ignore-vcs --no-ignore-parent -u --unrestricted -s
--case-sensitive -i --ignore-case -g --glob --regex -F --fixed-strings --and= -a
--absolute-path -l --list-details -L --follow -p --full-path -0 --print0 -d= --max-depth=
--min-depth= --exact-depth= -E= --exclude= --prune -t= --type= -e= --extension= -S= --size=
--changed-within= --changed-before= -o= --owner= --ignore-file= -c= --color= -j= --threads=
--max-results= -1 -q --quiet --show-errors --base-directory= --path-separator=
--strip-cwd-prefix --one-file-system -h --help -V --version --no-require-git --max-buffer-time=
-x! --exec! -X! --exec-batch! --batch-size=
""",
    ),
    "tree": (
        "tree --help, tree 2.1.0 (Debian 12)",
        "clap",
        """
-a -d -l -f -x -L= -R! -P= -I= --gitignore --gitfile= --ignore-case --matchdirs --metafirst
--prune --info --infofile= --noreport --charset= --filelimit= -q -N -Q -p -u -g -s -h
--si --du -D --timefmt= -F --inodes --device -v -t -c -U -r --dirsfirst --filesfirst
--sort= -i -A -S -n -C -X -J -H= -T= --nolinks --hintro= --houtro= --fromfile --fflinks
--version --help -o=write
""",
    ),
    "jq": (
        "jq --help and jq(1), jq 1.6 (Debian 12): jq can neither write a file nor run one",
        "clap",
        """
-c -n -e -s -r -j -a -R -C -M -S --tab --indent= --arg== --argjson== --slurpfile==
--rawfile== --args --jsonargs --seq --stream --stream-errors -f= --from-file= -L= --null-input
--raw-input --slurp --compact-output --raw-output --join-output --ascii-output
--sort-keys --color-output --monochrome-output --exit-status --help --version
""",
    ),
    "pytest": (
        "pytest --help, pytest 7.2.1 (Debian 12: python3-pytest)",
        "gnu",
        """
-k= -m= --markers -x --exitfirst --fixtures --funcargs --fixtures-per-test --pdb!
--pdbcls=! --trace! --capture= -s --runxfail --lf --last-failed --ff --failed-first --nf
--new-first --cache-show=? --cache-clear --lfnf= --last-failed-no-failures= --sw
--stepwise --sw-skip --stepwise-skip --durations= --durations-min= -v --verbose
--no-header --no-summary -q --quiet --verbosity= -r= --disable-warnings
--disable-pytest-warnings -l --showlocals --tb= --show-capture= --full-trace --color=
--code-highlight= --pastebin=! --junit-xml=write --junitxml=write --junit-prefix=
--junitprefix= -W= --pythonwarnings= --maxfail= --strict-config --strict-markers --strict
-c=! --continue-on-collection-errors --rootdir=! --collect-only --co
--pyargs --ignore= --ignore-glob= --deselect= --confcutdir=! --noconftest --keep-duplicates
--collect-in-virtualenv --import-mode= --doctest-modules --doctest-report=
--doctest-glob= --doctest-ignore-import-errors --doctest-continue-on-failure
--basetemp=write --version -V -h --help -p= --trace-config --debug=?! -o=!
--override-ini=! --assert= --setup-only --setup-show --setup-plan --log-level=
--log-format= --log-date-format= --log-cli-level= --log-cli-format= --log-cli-date-format=
--log-file=write --log-file-level= --log-file-format= --log-file-date-format=
--log-auto-indent= -n= --numprocesses= --dist= --timeout=
""",
    ),
    "npm": (
        "npm help test, npm help run-script, npm 9.2.0 (Debian 12)",
        "gnu",
        """
--if-present --ignore-scripts --silent -s --workspaces --ws --workspace= -w=
--include-workspace-root --script-shell=! --loglevel= -d --dd --ddd -q --quiet --json
--no-color --color=
""",
    ),
    "pnpm": (
        "pnpm help test, pnpm help run (pnpm 8): not packaged in Debian 12",
        "gnu",
        """
-r --recursive --if-present --parallel --stream --aggregate-output --silent -s
--filter= -F= --workspace-root -w --no-bail --sort --reverse --resume-from= --reporter=
""",
    ),
    "yarn": (
        "yarnpkg run --help, yarnpkg 1.22.19 (Debian 12: yarnpkg)",
        "gnu",
        "--silent -s --verbose --json --no-progress --offline --frozen-lockfile",
    ),
    "cargo": (
        "cargo test --help, cargo build --help, cargo 0.66.0 (Debian 12)",
        "gnu",
        """
-q --quiet -v --verbose --color= --frozen --locked --offline -p= --package= --workspace
--all --exclude= --lib --bins --bin=? --examples --example=? --tests --test=? --benches
--bench=? --all-targets --doc --no-run --no-fail-fast -F= --features= --all-features
--no-default-features -j= --jobs= -r --release --profile= --target= --ignore-rust-version
--message-format= --unit-graph --timings=? --keep-going --future-incompat-report -h --help
--manifest-path= --target-dir=write -Z=! --config=! --build-plan
""",
    ),
    "go": (
        "go help test, go help testflag, go help build, Go 1.19 (Debian 12: golang-1.19)",
        "go",
        """
-v -run= -count= -race -cover -covermode= -coverpkg= -short -timeout= -bench= -benchmem
-benchtime= -failfast -json -p= -tags= -parallel= -list= -skip= -shuffle= -cpu= -fuzz=
-fuzztime= -fuzzminimizetime= -vet= -mod= -modcacherw -trimpath -a -n -x -work
-buildvcs= -c! -o=write -coverprofile=write -cpuprofile=write -memprofile=write
-blockprofile=write -mutexprofile=write -trace=write -outputdir=write -exec=! -toolexec=!
-args! -ldflags=! -gcflags=! -asmflags=! -modfile=! -overlay=! -pgo=! -i
""",
    ),
    "find": (
        "find(1), findutils 4.9.0 (Debian 12)",
        "single",
        """
-H -L -P -D= -O1 -O2 -O3 -name= -iname= -path= -ipath= -wholename= -iwholename= -regex=
-iregex= -regextype= -lname= -ilname= -type= -xtype= -maxdepth= -mindepth= -mtime= -mmin=
-atime= -amin= -ctime= -cmin= -newer= -anewer= -cnewer= -newermt= -newerct=
-newerat= -size= -empty -user= -group= -uid= -gid= -nouser -nogroup -perm= -links= -inum=
-samefile= -readable -writable -executable -depth -d -xdev -mount -noleaf -follow
-daystart -ignore_readdir_race -noignore_readdir_race -warn -nowarn -fstype= -used=
-prune -print -print0 -printf= -ls -quit -true -false -not -a -and -o -or -help --help
-version --version -exec! -execdir! -ok! -okdir! -delete! -fprint=write -fprint0=write
-fprintf=write -fls=write -files0-from=
""",
    ),
    "ssh": ("ssh(1), OpenSSH 9.2p1 (Debian 12)", "clap", "-V -v -q -4 -6 -T -N -p= -l="),
    "scp": ("scp(1), OpenSSH 9.2p1 (Debian 12)", "clap", "-q -r -p -v -P= -4 -6 -C -3"),
    "jobs": ("bash(1) SHELL BUILTIN COMMANDS, bash 5.2.15 (Debian 12)", "clap", "-l -n -p -r -s"),
    "echo": ("bash(1) SHELL BUILTIN COMMANDS, bash 5.2.15 (Debian 12)", "words", ""),
    "printf": (
        "bash(1) SHELL BUILTIN COMMANDS, bash 5.2.15 (Debian 12): only -v, in runners",
        "words",
        "",
    ),
}
# `npm test` and `npm run X` take npm's options; `npm test -- --x` hands the rest on.
_SUBCOMMAND_OF = {
    "npm": ("test", "t", "tst", "run", "run-script", "rum", "urn"),
    "pnpm": ("test", "t", "run"),
    "yarn": ("test", "run"),
    "cargo": ("test", "t", "build", "b", "check", "c", "bench", "doc", "clippy", "fmt"),
    "go": ("test", "build", "vet"),
}


def _git_tables() -> dict[str, Table]:
    found = {}
    for name, spec in _GIT.items():
        source = f"{name} --help, git 2.39.5 (Debian 12)"
        digits = name in ("git log", "git show", "git reflog", "git rev-list", "git shortlog")
        if name == "git grep":
            digits = True  # -NUM is --context=NUM
        found[name] = Table(
            name,
            source,
            MappingProxyType(parse_spec(spec)),
            style="git",
            digits=digits,
            subcommands=name in ("git", "git stash"),
            # git writes inside its repository only, but for `clone <repo> <dir>`.
            writes="last" if name == "git clone" else "read",
        )
    return found


@cache
def _parsed() -> MappingProxyType[str, Table]:
    """Every shipped table, parsed once per process: each gate (one per thread) and each
    :func:`policy.judge` asks for them, and parsing the specs costs about 6 ms of CPU. Tables and
    their options are frozen, so one parse serves all."""
    return MappingProxyType(_all())


def _all() -> dict[str, Table]:
    found = _git_tables()
    for name, spec in _GNU.items():
        source = f"{name} --help and {name}(1) (Debian 12)"
        digits = name in ("head", "tail", "grep", "diff")
        options = MappingProxyType(parse_spec(spec))
        writes = _GNU_WRITES.get(name, "read")
        found[name] = Table(name, source, options, digits=digits, writes=writes)
    for name, (source, style, spec) in _OTHERS.items():
        options = MappingProxyType(parse_spec(spec))
        subs = _SUBCOMMAND_OF.get(name, ())
        if subs:
            found[name] = Table(
                name, source, MappingProxyType({}), style, subcommands=True, writes="read"
            )
            for sub in subs:
                found[f"{name} {sub}"] = Table(
                    f"{name} {sub}", source, options, style, writes="read"
                )
        else:
            writes = "last" if name == "scp" else "read"
            found[name] = Table(name, source, options, style, writes=writes)
    found["fdfind"] = Table(
        "fdfind", found["fd"].source, found["fd"].options, "clap", writes="read"
    )
    found["egrep"] = found["grep"]
    found["fgrep"] = found["grep"]
    found["yarnpkg"] = found["yarn"]
    for sub in _SUBCOMMAND_OF["yarn"]:
        found[f"yarnpkg {sub}"] = found[f"yarn {sub}"]
    return found


def shipped() -> Tables:
    """The tables the bridge ships (a new object: callers may extend it)."""
    return Tables(dict(_parsed()), MappingProxyType(WRITES_OPERANDS))
