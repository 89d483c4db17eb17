#!/usr/bin/env python3
"""Lists the Rust functions longer than 100 lines (from the `fn` line to its closing brace),
longest first, with "(test)" after those under a tests folder: the renovation issue's size
rule, measured. Run from the repository root. Braces in strings, chars and comments are
skipped by a small scanner, not a Rust parser, so a count can be off by a line or two."""
import re,sys,os,subprocess
FN=re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(default\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)')
def strip(line, state):
    # remove strings/comments crudely; state: in_block_comment, in_raw
    out=[];i=0;n=len(line)
    while i<n:
        if state['bc']:
            j=line.find('*/',i)
            if j<0: return ''.join(out)
            state['bc']=False;i=j+2;continue
        if state['raw']:
            j=line.find('"'+'#'*state['rawn'],i)
            if j<0: return ''.join(out)
            state['raw']=False;i=j+1+state['rawn'];continue
        if state['str']:
            while i<n:
                if line[i]=='\\': i+=2;continue
                if line[i]=='"': state['str']=False;i+=1;break
                i+=1
            continue
        c=line[i]
        if line.startswith('//',i): break
        if line.startswith('/*',i): state['bc']=True;i+=2;continue
        m=re.match(r'b?r(#*)"',line[i:])
        if m and (i==0 or not (line[i-1].isalnum() or line[i-1]=='_')):
            state['raw']=True;state['rawn']=len(m.group(1));i+=len(m.group(0));continue
        if c=='"': state['str']=True;i+=1;continue
        if c=="'":
            m=re.match(r"'(\\.|[^'\\])'|'\\u\{[0-9a-fA-F]+\}'|'\\x..'",line[i:])
            if m: i+=len(m.group(0));continue
        out.append(c);i+=1
    return ''.join(out)
files=subprocess.check_output(['git','ls-files','*.rs'],text=True).split()
res=[]
for f in files:
    lines=open(f).read().split('\n')
    st={'bc':False,'raw':False,'rawn':0,'str':False}
    clean=[strip(l,st) for l in lines]
    for idx,l in enumerate(clean):
        m=FN.match(l)
        if not m: continue
        depth=0;started=False
        for j in range(idx,len(clean)):
            for ch in clean[j]:
                if ch=='{': depth+=1;started=True
                elif ch=='}': depth-=1
                elif ch==';' and not started and depth==0: break
            else:
                if started and depth==0:
                    ln=j-idx+1
                    if ln>100: res.append((ln,f,idx+1,m.group(8)))
                    break
                continue
            break
test=lambda f: '/tests/' in f or f.startswith('tests/') or f.endswith('tests.rs')
for ln,f,i,n in sorted(res,reverse=True):
    print(ln,f+':'+str(i),n,'(test)' if test(f) else '')
